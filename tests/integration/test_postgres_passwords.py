"""A database URL whose user name and password hold URL characters unencoded (``@``, ``#``,
``/``, ``?``, ``:``, ``%``), as people paste them, reaches PostgreSQL through every way the
processes connect: the start check, the telemetry pool (asyncpg), the SQLAlchemy engine. The
test server checks passwords over TCP (scram-sha-256), so a garbled one is refused."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from adapters.postgres.connect import check_reachable
from adapters.postgres.engine import create_engine
from adapters.postgres.metrics_pool import create_pool
from domain.errors import Unavailable
from tests.fixtures.postgres import _admin

pytestmark = pytest.mark.integration

USER, PASSWORD = "tp@team", "p#s/s?x@y:z%"


async def test_a_password_with_url_characters_connects_every_way(pg_server: str) -> None:
    server = make_url(pg_server)
    quoted = PASSWORD.replace("'", "''")
    await _admin(
        pg_server,
        f'DROP ROLE IF EXISTS "{USER}"',
        f"""CREATE ROLE "{USER}" LOGIN PASSWORD '{quoted}'""",
    )
    url = f"postgresql://{USER}:{PASSWORD}@{server.host}:{server.port}/postgres"
    try:
        await check_reachable(url)
        pool = await create_pool(url)
        try:
            assert await pool.fetchval("SELECT current_user") == USER
        finally:
            await pool.close()
        engine = create_engine(url, pool_size=1)
        try:
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT current_user"))).scalar() == USER
        finally:
            await engine.dispose()
        with pytest.raises(Unavailable, match="password") as err:  # the password is checked
            await check_reachable(url.replace(":z%@", ":z@"))
        assert "p#s" not in str(err.value) and "postgresql://tp%40team:***@" in str(err.value)
    finally:
        await _admin(pg_server, f'DROP ROLE IF EXISTS "{USER}"')
