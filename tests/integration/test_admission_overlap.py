"""The overlapped pass on PostgreSQL when the connection is lost mid-store: the scheduler's
backend is terminated inside the second batch's transaction, after its jobs statement and
before its reserve statement. The first batch stays stored, the second is rolled back whole
(no job moved without its reservation), nothing after it is stored, the pass raises
``Unavailable``; the next pass, on a new connection, stores the rest once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.reservations import PostgresReservationRepository
from adapters.postgres.uow import PostgresUnitOfWork
from domain.admission import Reservation
from domain.errors import Unavailable
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_scheduler_overlap import Recording, attempts_of, recording
from tests.contract.test_scheduler_view import reserved_gpus
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration


async def test_a_connection_lost_mid_store_keeps_each_batch_whole(
    pg_engine: AsyncEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow, nodes=2)
    jobs = [gpu_job(1) for _ in range(12)]
    await add(uow, *jobs)
    one: Recording = recording(uow, overlap=3, batch=2)
    reserve = PostgresReservationRepository._reserve  # reserve_many's and reserve_encoded's
    calls: list[int] = []

    async def lost_in_the_second(self: Any, batch: Sequence[Reservation], *args: Any) -> None:
        calls.append(len(batch))
        if len(calls) == 2:  # inside the second batch's transaction, its jobs moved
            pid = (await self._conn.execute(text("SELECT pg_backend_pid()"))).scalar()
            admin = await asyncpg.connect(plain_dsn(pg_url))
            try:  # with a timeout it returns once the backend has exited
                assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
            finally:
                await admin.close()
        await reserve(self, batch, *args)

    monkeypatch.setattr(PostgresReservationRepository, "_reserve", lost_in_the_second)
    with pytest.raises(Unavailable):
        await one.pass_once()
    first, second = one.batches[0], one.batches[1]
    assert len(one.batches) == 2  # nothing was stored after the lost one
    assert await attempts_of(uow, [j.id for j in jobs]) == [1] * len(first) + [0] * (
        len(jobs) - len(first)
    )
    assert [j.id for j in jobs[: len(first)]] == first and second
    async with uow() as u:
        rows = {j.id: await u.jobs.get(j.id) for j in jobs}
    states = {i: row.state.value if row else "" for i, row in rows.items()}
    assert [states[j] for j in second] == ["pending"] * len(second)  # rolled back whole
    assert len(await reserved_gpus(uow)) == len(first)
    monkeypatch.undo()
    result = await one.pass_once()  # the pool has dropped the dead connection
    assert sorted(result.reserved) == sorted(j.id for j in jobs[len(first) :])
    gpus = await reserved_gpus(uow)
    assert len(gpus) == len(set(gpus)) == 12
    assert await attempts_of(uow, [j.id for j in jobs]) == [1] * 12
