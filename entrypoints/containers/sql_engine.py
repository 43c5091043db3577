"""The control plane's SQLAlchemy engine, as a container resource: apart from ``database.py``,
whose asyncpg resources the telemetry gateway uses without importing SQLAlchemy."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.engine import create_engine
from entrypoints.containers.database import require_database
from entrypoints.settings import Settings


async def database_engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    url = require_database(settings)
    # no overflow: connections beyond the pool would be opened and closed per request (a fork
    # and a SCRAM handshake each); waiting for a pooled connection is cheaper
    engine = create_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=0,
        keepalive_seconds=settings.db_keepalive_seconds,
    )
    try:
        yield engine
    finally:
        await engine.dispose()
