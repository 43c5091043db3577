"""What the webhook outbox trigger costs a job's state changes (docs/benchmarks.md, "Webhook
outbox").

Each round writes the same workload (N jobs, each committed and moved pending, starting,
running, succeeded, one transaction per change, through the PostgreSQL repository as the
control plane does) under four set-ups, interleaved so the machine's drift hits all alike:
the trigger disabled (the baseline: what a control plane without webhooks paid); no webhook;
50 webhooks matching no job (the trigger looks and writes nothing); one webhook matching
every job (an outbox row per change, and a notification). Reported: changes per second of
each, and each as a ratio to the baseline in the same round.

Run: ``.venv/bin/pytest tests/bench/bench_webhook_outbox.py -m bench -s``
(``BENCH_JOBS=N``, default 300; ``BENCH_ROUNDS=R``, default 3).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from adapters.postgres.webhook_tables import webhook_outbox, webhook_subscriptions
from adapters.postgres.webhooks import PostgresWebhooks
from domain.lifecycle import JobState
from domain.webhooks import Format, Scope, StoredSecret, Subscription
from tests.contract.builders import a_job

pytestmark = pytest.mark.bench
JOBS = int(os.environ.get("BENCH_JOBS", "300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
AT = datetime(2026, 12, 5, tzinfo=UTC)
MOVES = (JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED)


async def _changes_per_second(engine: AsyncEngine, owner: str) -> float:
    start = time.perf_counter()
    for _ in range(JOBS):
        job = a_job(owner=owner)
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            await uow.commit()
        for n, state in enumerate(MOVES, 1):
            moved = job.moved(state, job.updated_at + timedelta(seconds=n))
            async with PostgresUnitOfWork(engine) as uow:
                await uow.jobs.update(moved, job.state)
                await uow.commit()
            job = moved
    return JOBS * (1 + len(MOVES)) / (time.perf_counter() - start)


async def _subscribe(engine: AsyncEngine, targets: list[str]) -> None:
    async with engine.begin() as conn:
        await conn.execute(delete(webhook_outbox))
        await conn.execute(delete(webhook_subscriptions))
    store = PostgresWebhooks(engine)
    for i, target in enumerate(targets):
        await store.add(
            Subscription(f"wh-{i}", "admin", Scope.USER, target, "https://hooks.invalid/b", (),
                         Format.TUNEPLANE, AT, StoredSecret("sealed-bench")),
            limit_per_owner=len(targets),
        )  # fmt: skip


async def _trigger(engine: AsyncEngine, *, enabled: bool) -> None:
    verb = "ENABLE" if enabled else "DISABLE"
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE job_events {verb} TRIGGER job_events_webhooks"))


async def test_outbox_trigger_cost(pg_engine: AsyncEngine) -> None:
    configs = {
        "trigger disabled": [],
        "none": [],
        "50 webhooks, none matching": [f"nobody{i}" for i in range(50)],
        "1 webhook matching every job": ["bench"],
    }
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(ROUNDS):
        for name, targets in configs.items():
            await _subscribe(pg_engine, targets)
            await _trigger(pg_engine, enabled=name != "trigger disabled")
            rates[name].append(await _changes_per_second(pg_engine, "bench"))
    base = statistics.median(rates["trigger disabled"])
    print(f"\nwebhook outbox trigger: {JOBS} jobs x 4 changes, {ROUNDS} rounds (median)")
    for name, values in rates.items():
        ratios = [v / n for v, n in zip(values, rates["trigger disabled"], strict=True)]
        print(
            f"  {name:32s} {statistics.median(values):8.0f} changes/s   "
            f"ratio to disabled {statistics.median(ratios):.3f} (rounds: "
            + ", ".join(f"{r:.3f}" for r in ratios) + ")"
        )  # fmt: skip
    assert base > 0
