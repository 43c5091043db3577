"""Reading a trickled series before and after block compaction (not part of the suite).

A collector that ships one record at a time stores a block per point. ``BENCH_TRICKLE`` records
(default 4,096: one full 4,096-step bucket) of one tag are appended one by one through the
metrics store, then, in the same run, each query is timed before and after ``compact_blocks``:
a 1,000-point view of the whole bucket (aggregated from raw points), the raw inspector's first
page (1,000 points) and a 100-step zoom (raw points).

Run: ``.venv/bin/pytest tests/bench/bench_metric_compaction.py -m bench -s``
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metric_compaction import compact_blocks
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from domain.telemetry import MemberScope, plan_view
from domain.telemetry_ports import CollectorCounters
from tests.contract.builders import a_job, a_member, an_attempt
from tests.support.points import source_batch

pytestmark = pytest.mark.bench

TRICKLE = int(os.environ.get("BENCH_TRICKLE", "4096"))
REPEAT = 50
NOW = datetime(2026, 12, 3, tzinfo=UTC)


async def median_ms(call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


async def test_compaction_speeds_up_reads_of_a_trickle(pg_url: str, pg_engine: AsyncEngine) -> None:
    job = a_job()
    attempt = an_attempt(job, 1)
    member = a_member(attempt, 0)
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        await uow.members.add(member)
        await uow.commit()
    scope = MemberScope(job.id, attempt.id, member.id, 0)
    pool = await create_pool(pg_url)
    store = PostgresMetrics(pool)
    try:
        t0 = time.perf_counter()
        for step in range(TRICKLE):
            batch = source_batch(
                "m.jsonl#0", "jsonl", ["loss"], [step], [step], [step], [1 / (step + 1)]
            )
            await store.append(scope, [batch], CollectorCounters(), NOW)
        trickle_s = time.perf_counter() - t0
        (series,) = await store.series(job.id)
        last = TRICKLE - 1
        queries: dict[str, Callable[[], Awaitable[object]]] = {
            "1,000-point view of the bucket": lambda: store.view(series.id, plan_view(0, last)),
            "raw inspector page (1,000 points)": lambda: store.raw(series.id, 0, last, -1, 1000),
            "100-step zoom (raw)": lambda: store.view(series.id, plan_view(1000, 1099)),
        }
        before = {k: await median_ms(q) for k, q in queries.items()}
        blocks = await pool.fetchval("SELECT count(*) FROM metric_blocks")
        t0 = time.perf_counter()
        done = await compact_blocks(pool)
        compact_ms = (time.perf_counter() - t0) * 1000
        after = {k: await median_ms(q) for k, q in queries.items()}
    finally:
        await pool.close()
    print(f"\n{TRICKLE} one-point appends in {trickle_s:.1f} s → {blocks} blocks;")
    print(f"compaction: {done.removed} blocks → {done.merged} in {compact_ms:.0f} ms")
    for k in queries:
        ratio = before[k] / after[k]
        print(f"  {k}: {before[k]:.2f} ms → {after[k]:.2f} ms (median of {REPEAT}), {ratio:.1f}×")
    assert done.merged == 1  # what was measured is what the gateway does
