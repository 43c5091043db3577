"""PostgreSQL only: driver errors reach the application as domain errors, with a fix."""

from __future__ import annotations

import socket

import pytest

from adapters.postgres.connect import async_url
from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork
from domain.errors import Unavailable

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


async def test_a_missing_schema_asks_for_migrations(empty_db: str) -> None:
    engine = create_engine(empty_db)
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
