"""Warming the scheduling store's connection (adapters/postgres/store_warm_up.py): the store runs
on that connection (its statements are prepared there) and leaves no row anywhere, even when
the unit then commits, or when the connection is lost in the middle; the passes after it store
as before."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import PostgresUnitOfWork
from adapters.postgres.reservations import PostgresReservationRepository
from domain.admission import Reservation
from domain.errors import Unavailable
from tests.contract.builders import T0
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_scheduler_overlap import attempts_of, recording
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration

# every table's rows, as one digest a table (sequences apart: a warm-up may consume ids)
TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"


async def contents(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        tables = [r[0] for r in await conn.fetch(TABLES)]
        return {
            t: await conn.fetchval(
                f"SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, ',' "
                f"ORDER BY t::text)), '') FROM {t} AS t"
            )
            for t in tables
        }
    finally:
        await conn.close()


async def test_the_warm_up_stores_on_its_connection_and_leaves_nothing(
    pg_engine: AsyncEngine, pg_url: str
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow, nodes=2)
    jobs = [gpu_job(g) for g in (4, 2, 1, 8)]
    await add(uow, *jobs)
    before = await contents(pg_url)
    async with uow() as unit:
        await unit.scheduling.warm(T0)
        conn = unit._conn
        assert conn is not None
        prepared = (await conn.execute(text("SELECT statement FROM pg_prepared_statements"))).all()
        await unit.commit()  # nothing to commit: the savepoint was rolled back
    # the jobs and the reserve statements ran there
    for head in ("WITH moved AS", "WITH d AS"):
        assert any(s.startswith(head) for (s,) in prepared), head
    assert await contents(pg_url) == before

    one = recording(uow, overlap=2, batch=2)
    one.store_groups = 2  # two connections warmed at once
    await one.warm()
    assert await contents(pg_url) == before
    result = await one.pass_once()  # the passes after it store as before
    assert sorted(result.reserved) == sorted(j.id for j in jobs)
    assert await attempts_of(uow, [j.id for j in jobs]) == [1] * len(jobs)


async def test_a_connection_lost_in_the_warm_up_leaves_nothing(
    pg_engine: AsyncEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow, nodes=1)
    await add(uow, gpu_job(1))
    before = await contents(pg_url)
    reserve = PostgresReservationRepository._reserve

    async def lost(self: Any, batch: Sequence[Reservation], *args: Any) -> None:
        pid = (await self._conn.execute(text("SELECT pg_backend_pid()"))).scalar()
        admin = await asyncpg.connect(plain_dsn(pg_url))
        try:  # with a timeout it returns once the backend has exited
            assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
        finally:
            await admin.close()
        await reserve(self, batch, *args)

    monkeypatch.setattr(PostgresReservationRepository, "_reserve", lost)
    with pytest.raises(Unavailable):
        async with uow() as unit:
            await unit.scheduling.warm(T0)
    assert await contents(pg_url) == before
    monkeypatch.setattr(PostgresReservationRepository, "_reserve", reserve)
    async with uow() as unit:  # a new connection warms
        await unit.scheduling.warm(T0)
    assert await contents(pg_url) == before
