"""PostgreSQL only: driver errors reach the application as domain errors, with a fix."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres import PostgresUnitOfWork, create_engine
from adapters.postgres.engine import async_url, plain_url
from domain.errors import Unavailable
from tests.fixtures.postgres import database_url

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_no_server_is_unavailable() -> None:
    engine = create_engine(f"postgresql://u:p@127.0.0.1:{_closed_port()}/db", connect_timeout=2)
    try:
        with pytest.raises(Unavailable) as err:
            async with PostgresUnitOfWork(engine):
                pass
    finally:
        await engine.dispose()
    assert "TUNEPLANE_DATABASE_URL" in err.value.fix


async def test_an_exhausted_pool_is_unavailable(pg_url: str) -> None:
    engine = create_engine(pg_url, pool_size=1, max_overflow=0, pool_timeout=0.1)
    try:
        async with PostgresUnitOfWork(engine):
            with pytest.raises(Unavailable) as err:
                async with PostgresUnitOfWork(engine):
                    pass
    finally:
        await engine.dispose()
    assert "pool" in err.value.message


@pytest.fixture
async def unmigrated_url(pg_server: str) -> AsyncIterator[str]:
    name = f"tp_bare_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(plain_url(pg_server))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield database_url(pg_server, name)
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def test_a_missing_schema_asks_for_migrations(unmigrated_url: str) -> None:
    engine = create_engine(unmigrated_url)
    try:
        async with PostgresUnitOfWork(engine) as uow:
            with pytest.raises(Unavailable) as err:
                await uow.tokens.count()
    finally:
        await engine.dispose()
    assert "migrat" in err.value.fix


@pytest.mark.parametrize(
    "url",
    ["postgres://u:p@h:5432/d", "postgresql://u:p@h/d", "postgresql+psycopg://u:p@h/d"],
)
def test_any_postgresql_url_form_uses_asyncpg(url: str) -> None:
    assert async_url(url).startswith("postgresql+asyncpg://u:p@h")
    with pytest.raises(ValueError):
        async_url("mysql://u:p@h/d")
