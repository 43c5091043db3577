"""Alembic environment for an async engine; driven by ``adapters.postgres.migrate``.

``migrate`` hands over an open connection in ``config.attributes["connection"]``; without one
(e.g. ``alembic`` run by hand) the URL comes from ``sqlalchemy.url`` or TUNEPLANE_DATABASE_URL.
Online migrations take a transaction-level advisory lock so that processes starting together
(control plane, gateways) migrate one after the other.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from adapters.postgres.connect import async_url
from adapters.postgres.engine import create_engine
from adapters.postgres.tables import metadata

MIGRATION_LOCK = 0x7475_6E65  # "tune"

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: run the migrations through adapters.postgres.migrate")
    return async_url(url)


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_with(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        context.run_migrations()


async def run_async() -> None:
    engine = create_engine(_url(), pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_with)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_offline()
elif (given := config.attributes.get("connection")) is not None:
    run_with(given)
else:
    asyncio.run(run_async())
