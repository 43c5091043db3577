"""What several processes' containers share: the resources they are built from (each an async
generator that `dependency_injector` starts and stops), and the one way a process starts and
stops its container (:func:`started`, :func:`resolve`)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TypeVar, cast

import asyncpg
from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.blobs import FilesystemBlobStore
from adapters.postgres.engine import check_reachable, create_engine
from adapters.postgres.metrics import create_pool
from adapters.postgres.signals import PostgresSignals
from adapters.postgres.signing_keys import PostgresSigningKeys
from application.context import TelemetrySettings
from application.node_control import ControlSettings
from domain.blob_ports import BlobStore
from domain.coordination_ports import NO_SIGNALS, Signals
from domain.errors import InvalidInput, Unavailable
from entrypoints.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
C = TypeVar("C", bound=containers.Container)


@asynccontextmanager
async def started(container: C) -> AsyncIterator[C]:
    """Start every resource of ``container``; stop them all on the way out, however it ends.
    The one start/stop sequence of every process (and of `tp up`'s set-up steps)."""
    pending = container.init_resources()
    if pending is not None:
        await pending
    try:
        yield container
    finally:
        pending = container.shutdown_resources()
        if pending is not None:
            await pending


async def resolve(provider: providers.Provider[T]) -> T:
    """The object ``provider`` gives, awaited when it is built from async resources."""
    value: object = provider()
    if inspect.isawaitable(value):
        value = await value
    return cast(T, value)


def require_database(settings: Settings) -> str:
    """The database URL; a clear error without one (before the container's resources, which
    all need it, start failing at once)."""
    if not settings.database_url:
        raise InvalidInput(
            "no database configured",
            fix="set TUNEPLANE_DATABASE_URL, or use `tp up`, which starts a private PostgreSQL",
        )
    return settings.database_url


async def reach_database(settings: Settings) -> str:
    """``require_database``, then one connection: a clear error for a database that is down or
    refuses us, before the container's resources start (each would fail its own way)."""
    url = require_database(settings)
    await check_reachable(url)
    return url


async def database_engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    url = require_database(settings)
    # no overflow: connections beyond the pool would be opened and closed per request (a fork
    # and a SCRAM handshake each); waiting for a pooled connection is cheaper
    engine = create_engine(url, pool_size=settings.db_pool_size, max_overflow=0)
    try:
        yield engine
    finally:
        await engine.dispose()


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
    pool = await create_pool(require_database(settings), max_size=max_size)
    try:
        yield pool
    finally:
        await pool.close()


async def blob_store(settings: Settings) -> AsyncIterator[BlobStore]:
    """The filesystem store (the default, `tp up` included), or S3 when TUNEPLANE_BLOB_STORE
    is an s3:// URL: then the bucket is checked first, and a process that cannot use it stops
    with what to fix, unless the store is only unreachable (it may come back)."""
    location = settings.blob_s3
    if location is None:
        yield FilesystemBlobStore(settings.blob_dir)
        return
    from adapters.blobs_s3 import Misconfigured, S3BlobStore  # the AWS SDK only for S3

    async with S3BlobStore.connect(
        location,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        addressing_style=settings.s3_addressing_style,
    ) as store:
        try:
            await store.check()
        except Misconfigured:
            raise  # the process stops with what to fix
        except Unavailable as exc:
            log.warning("%s; going on, requests that need a blob get 503 until it is back", exc)
        yield store


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


def control_settings(settings: Settings) -> ControlSettings:
    """The node gateway's sessions: heartbeats, credential rotation, when a session is dead."""
    return ControlSettings(
        heartbeat=timedelta(seconds=settings.heartbeat_seconds),
        rotate_every=timedelta(seconds=settings.credential_rotate_seconds),
        rotation_grace=timedelta(seconds=settings.credential_grace_seconds),
        # as the control plane's "its gateway died" limit (entrypoints/server.py)
        session_timeout=timedelta(seconds=max(6 * settings.heartbeat_seconds, 30)),
    )
