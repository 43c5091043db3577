"""Every connection TunePlane opens to PostgreSQL asks the server to notice a client host that
vanished without a word (cut off, powered down) within ``TUNEPLANE_DB_KEEPALIVE_SECONDS``, so
that its leader lease and its open transactions' locks are freed (the operating system's
default is two hours). tests/e2e/test_multi_host.py cuts a leader's host off for real."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from adapters.postgres.connect import keepalives
from adapters.postgres.engine import create_engine
from adapters.postgres.lease import PostgresLeaderLease
from adapters.postgres.metrics_pool import create_pool

pytestmark = pytest.mark.integration

NAMES = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


def test_the_settings_split_the_time_between_silence_and_three_probes() -> None:
    assert keepalives(60) == dict(zip(NAMES, ("30", "10", "3"), strict=True))
    assert keepalives(6) == dict(zip(NAMES, ("3", "1", "3"), strict=True))
    assert keepalives(1) == dict(zip(NAMES, ("1", "1", "3"), strict=True))  # never 0: the OS's


async def test_the_engine_the_metrics_pool_and_the_lease_each_ask_for_them(pg_url: str) -> None:
    engine = create_engine(pg_url, pool_size=1, keepalive_seconds=6)
    try:
        async with engine.connect() as conn:
            seen = [(await conn.execute(text(f"SHOW {n}"))).scalar() for n in NAMES]
    finally:
        await engine.dispose()
    assert seen == ["3", "1", "3"]

    pool = await create_pool(pg_url, keepalive_seconds=12)
    try:
        assert [await pool.fetchval(f"SHOW {n}") for n in NAMES] == ["6", "2", "3"]
    finally:
        await pool.close()

    lease = PostgresLeaderLease(pg_url, "keepalive-check", keepalive_seconds=30)
    try:
        assert await lease.acquire()
        held = lease._conn  # the lease's own session, which holds the lock
        assert held is not None
        assert [await held.fetchval(f"SHOW {n}") for n in NAMES] == ["15", "5", "3"]
    finally:
        await lease.release()


async def test_the_engine_and_the_metrics_pool_never_jit_compile(pg_url: str) -> None:
    """JIT is off in both pools' sessions (adapters/postgres/engine.py, NO_JIT): on a server built
    with LLVM the live reservations' read compiled for 8 ms to return 20 rows in 0.45 ms
    (docs/persistence.md, "No JIT"). The suite's server has no JIT, so the setting is what
    the test can see."""
    engine = create_engine(pg_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SHOW jit"))).scalar() == "off"
    finally:
        await engine.dispose()
    pool = await create_pool(pg_url)
    try:
        assert await pool.fetchval("SHOW jit") == "off"
    finally:
        await pool.close()
