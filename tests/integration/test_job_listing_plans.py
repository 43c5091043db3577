"""The job listing by state and queue (``GET /v1/jobs?state=…&queue=…``,
``PostgresJobRepository.list``) reads only the rows it returns, whatever else the table holds:
it walks ``ix_jobs_state_queue_created_at_id``. Without that index it would walk the jobs of
the state in every queue, or of the queue in every state, with a filter (docs/benchmarks.md,
session 46 continued: why the index stays though the fill store pays for it). Each case also
checks what the pages return."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from domain.lifecycle import JobState
from tests.contract.builders import T0
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.integration.test_scheduling_plans import admin

pytestmark = pytest.mark.integration

INDEX = "ix_jobs_state_queue_created_at_id"


async def test_the_listing_by_state_and_queue_reads_only_its_own_rows(
    pg_engine: AsyncEngine, pg_url: str
) -> None:
    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow)

    # the asked rows are the oldest: every later row has their state in another queue, or
    # their queue in another state
    def job(i: int, queue: str, state: JobState) -> Any:
        return gpu_job(1, queue=queue, state=state, created_at=T0 + timedelta(seconds=i))

    wanted = [job(i, "high", JobState.FAILED) for i in range(3)]
    others = [job(10 + i, "default", JobState.FAILED) for i in range(300)]
    others += [job(400 + i, "high", JobState.SUCCEEDED) for i in range(300)]
    await add(uow, *wanted, *others)
    await admin(pg_url, "VACUUM jobs")
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "FROM jobs" in statement:
            seen.append((statement, parameters))

    event.listen(pg_engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uow() as u:
            first = await u.jobs.list(
                owner=None, states=[JobState.FAILED], limit=2, cursor=None, queue="high"
            )
            assert first.next_cursor is not None
            second = await u.jobs.list(
                owner=None, states=[JobState.FAILED], limit=2, cursor=first.next_cursor,
                queue="high",
            )  # fmt: skip
    finally:
        event.remove(pg_engine.sync_engine, "before_cursor_execute", capture)
    assert [j.id for j in first.jobs] == [wanted[2].id, wanted[1].id]
    assert [j.id for j in second.jobs] == [wanted[0].id] and second.next_cursor is None
    assert len(seen) == 2
    for analyzed in (False, True):
        if analyzed:
            await admin(pg_url, "ANALYZE jobs")
        plans = []
        for statement, parameters in seen:
            async with pg_engine.connect() as conn:
                await conn.execute(text("SET enable_seqscan = off"))  # as a large table
                explain = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + statement
                result = await conn.exec_driver_sql(explain, parameters)
                plan = "\n".join(r[0] for r in result)
            plans.append(plan)
            # an index walk that reads no row of another kind (the first page walks the
            # state-and-queue index; the second may walk the queue's, bounded by the cursor)
            assert "Index" in plan and "Seq Scan" not in plan and "Bitmap" not in plan, plan
            assert "Rows Removed by Filter" not in plan, plan
        assert INDEX in plans[0], plans[0]
