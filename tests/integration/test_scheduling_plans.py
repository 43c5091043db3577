"""The scheduler's statements keep their index plans whatever the statistics say
(adapters/postgres/scheduling.py; docs/benchmarks.md, "Session 45"): the store's jobs
statement finds its jobs by primary key on a table vacuumed but never analyzed (where it once
scanned the pending entries of a state index for each id), and the read probes the
reservation tables by index after they were vacuumed and analyzed while empty (where a plan
kept from then scanned every member for each GPU). Each case also checks what the statements
return against what the tables hold."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.scheduling import (
    _CHANGED_SINCE,
    _NODES,
    _QUEUES,
    _READ_SETTINGS,
    _START,
    start_params,
)
from adapters.postgres.uow import PostgresUnitOfWork
from domain.admission import QueueView, Reservation
from domain.fleet import Queue
from domain.jobs import Attempt
from domain.lifecycle import AttemptState, JobState
from domain.ports import Start
from tests.contract.builders import at
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, on, reserve, setup_fleet
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration


async def admin(pg_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(plain_dsn(pg_url))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def start_of(job_id: str) -> Start:
    attempt = Attempt(f"att-{job_id}", job_id, 1, AttemptState.LAUNCHING, at(1), at(1))
    return Start(job_id, attempt, (), Reservation(attempt.id, job_id, "default", (), at(1)))


async def test_the_jobs_statement_probes_the_key_on_a_table_never_analyzed(
    pg_engine: AsyncEngine, pg_url: str
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow)
    pending = [gpu_job(1) for _ in range(300)]
    running = [gpu_job(1, state=JobState.RUNNING) for _ in range(20)]
    await add(uow, *pending, *running)
    # the worst case seen: vacuumed (row and page counts known), never analyzed
    await admin(pg_url, "VACUUM jobs")
    chosen = [j.id for j in pending[::7]] + [j.id for j in running[:5]]
    params = start_params([start_of(i) for i in chosen], at(1))
    for scans in ("on", "off"):  # off: as if the table were large (a scan costs more)
        async with pg_engine.connect() as conn:
            await conn.execute(text(f"SET enable_seqscan = {scans}"))
            explain = text("EXPLAIN (COSTS OFF) " + _START.text)
            plan = "\n".join(r[0] for r in await conn.execute(explain, params))
            await conn.execute(text("RESET enable_seqscan"))
        assert "ix_jobs_state" not in plan
        if scans == "off":
            assert "pk_jobs" in plan
    async with uow() as u:  # only the jobs still pending move
        moved = await u.scheduling.start([start_of(i) for i in chosen], at(1))
        await u.commit()
    assert sorted(moved) == sorted(j.id for j in pending[::7])
    async with uow() as u:
        states = {i: (await u.jobs.get(i)).state for i in chosen}  # type: ignore[union-attr]
    assert {i for i, s in states.items() if s is JobState.STARTING} == set(moved)
    assert {states[j.id] for j in running[:5]} == {JobState.RUNNING}


async def test_the_read_probes_by_index_after_the_idle_fleet_was_vacuumed(
    pg_engine: AsyncEngine, pg_url: str
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow, nodes=4)
    await reserve(uow, on("a-0", 0, 1))  # then released: the tables have pages, no rows
    async with uow() as u:
        for r in await u.reservations.live():
            await u.reservations.release(r.attempt_id)
        await u.commit()
    # what autovacuum does to an idle fleet: no rows, no pages, statistics saying so
    tables = "reservations, reservation_members, attempts, gpu_claims, jobs"
    await admin(pg_url, f"VACUUM ANALYZE {tables}")
    async with pg_engine.connect() as conn:
        await conn.execute(_READ_SETTINGS)
        plans = []
        for statement, params in ((_NODES, {}), (_QUEUES, {}), (_CHANGED_SINCE, {"since": 0})):
            rows = await conn.execute(
                text("EXPLAIN (COSTS OFF) " + statement.text), {"pending": "pending", **params}
            )
            plans.append("\n".join(r[0] for r in rows))
    for plan in plans:
        assert "Seq Scan on reservation_members" not in plan
        assert "Seq Scan on attempts" not in plan
    assert "Join Filter: (m.attempt_id" not in plans[1]
    # what the read says once the tables fill again, through the same statements
    first = await reserve(uow, on("a-0", 0, 1, 2), on("a-1", 0, member=1))
    await reserve(uow, on("a-2", 4))
    async with uow() as u:
        snap = await u.scheduling.snapshot(10)
    assert snap.queues["default"] == QueueView(Queue("default", "t"), gpus_in_use=5, jobs_in_use=2)
    free = {n.name: n.free_gpus for n in snap.nodes}
    assert free["a-0"] == (3, 4, 5, 6, 7)
    assert free["a-1"] == (1, 2, 3, 4, 5, 6, 7)
    assert free["a-2"] == (0, 1, 2, 3, 5, 6, 7)
    async with uow() as u:
        assert await u.reservations.get(first.attempt_id) == first
