"""PostgreSQL for the processes that use it (the API, both gateways, `tp up`'s set-up): the
URL checked, the engine, signals, the metrics pool, and the keys and lifetimes of collector
tokens kept there. Each resource is an async generator `dependency_injector` starts and stops."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TypeVar

import asyncpg
from dependency_injector import containers

from adapters.postgres.connect import check_reachable
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.signals import PostgresSignals
from adapters.postgres.signing_keys import PostgresSigningKeys
from application.context import TelemetrySettings
from domain.coordination_ports import NO_SIGNALS, Signals
from entrypoints import process
from entrypoints.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
C = TypeVar("C", bound=containers.Container)


def require_database(settings: Settings) -> str:
    """The database URL; a clear error without one (``entrypoints.process.require_database``)."""
    return process.require_database(settings.database_url)


async def reach_database(settings: Settings) -> str:
    """``require_database``, then one connection: a clear error for a database that is down or
    refuses us, before the container's resources start (each would fail its own way)."""
    url = require_database(settings)
    await check_reachable(url)
    return url


async def signals(settings: Settings) -> AsyncIterator[Signals]:
    if not settings.signals:
        yield NO_SIGNALS
        return
    listener = PostgresSignals(require_database(settings))
    await listener.start()
    try:
        yield listener
    finally:
        await listener.close()


async def metrics_pool(settings: Settings, max_size: int = 4) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(
        require_database(settings),
        max_size=max_size,
        keepalive_seconds=settings.db_keepalive_seconds,
    )
    try:
        yield pool
    finally:
        await pool.close()


def signing_keys(settings: Settings, pool: asyncpg.Pool) -> PostgresSigningKeys:
    """Keys that sign collector tokens: rotated, each kept as long as a token it signed lives."""
    rotate = timedelta(seconds=settings.signing_key_rotate_seconds)
    lifetime = timedelta(seconds=settings.collector_token_seconds)
    return PostgresSigningKeys(pool, rotate_after=rotate, keep_for=rotate + lifetime)


def telemetry_settings(settings: Settings) -> TelemetrySettings:
    """How long members' collector tokens live, and ship after their attempt ended."""
    return TelemetrySettings(
        token_lifetime=timedelta(seconds=settings.collector_token_seconds),
        grace=timedelta(seconds=settings.telemetry_grace_seconds),
    )
