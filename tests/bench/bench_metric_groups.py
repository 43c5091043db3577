"""The metrics store's group commit alone: CPU per group and per batch, in the caller's process
and in PostgreSQL, for a few group sizes (not part of the suite).

What ``bench_telemetry_streams.py`` cannot separate: there the group size follows the load (a
transaction takes what arrived while the previous one ran: one or two batches at 1,000 quiet
streams, tens when the machine is busy), so a change to what a group costs and one to what a
batch costs read the same. Here each round appends ``G`` batches of ``BENCH_POINTS`` (100)
points from ``G`` members at once, which the store takes as one group, ``BENCH_ROUNDS`` times
per size (``BENCH_GROUPS``, "1,16"). Process CPU (``time.process_time``: asyncpg, numpy, uvloop
as in the gateway) and PostgreSQL's (the postmaster and its backends, from /proc) per round, on a
private durable PostgreSQL (fsync on). Every point is checked stored once at the end.

Run: ``.venv/bin/pytest tests/bench/bench_metric_groups.py -m bench -s``
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime

import numpy as np
import pytest
import uvloop

from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.telemetry.columns import Points
from domain.telemetry import MemberScope, SourceBatch
from domain.telemetry_ports import CollectorCounters
from tests.bench.bench_telemetry_streams import (  # noqa: F401 - durable_pg is a fixture
    add_members,
    durable_pg,
)
from tests.bench.proc_stats import cpu_seconds, family, loadavg

pytestmark = pytest.mark.bench

POINTS = int(os.environ.get("BENCH_POINTS", "100"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "300"))
GROUPS = [int(g) for g in os.environ.get("BENCH_GROUPS", "1,16").split(",")]
TAGS = ["train/loss", "train/reward", "train/lr", "grad_norm"]


def a_batch(first: int, records: int) -> SourceBatch:
    steps = np.repeat(np.arange(first, first + records, dtype=np.int64), len(TAGS))
    tag = np.tile(np.arange(len(TAGS), dtype=np.uint32), records)
    points = Points(list(TAGS), steps, tag, steps, steps + 1.7e9, steps * 0.5)
    return SourceBatch("metrics.jsonl#0", "jsonl", points)


async def measure(url: str, postmaster: int, scopes: list[MemberScope]) -> list[str]:
    pool = await create_pool(url, min_size=8, max_size=8)  # every backend there from the start
    store = PostgresMetrics(pool)
    records = POINTS // len(TAGS)
    lines = []
    try:
        await asyncio.gather(*(store.append(s, [a_batch(0, records)], CollectorCounters(),
                                            datetime.now(UTC)) for s in scopes))  # fmt: skip
        first = records  # every series made: what follows is steady ingest
        for size in GROUPS:
            groups0, load0 = store.groups.groups, loadavg()
            pg = family(postmaster)
            pg0, cpu0, t0 = sum(cpu_seconds(p) for p in pg), time.process_time(), time.time()
            for r in range(ROUNDS):
                now = datetime.now(UTC)
                batch = a_batch(first, records)
                members = scopes[(r * size) % len(scopes) :][:size]
                await asyncio.gather(
                    *(store.append(s, [batch], CollectorCounters(), now) for s in members)
                )
                first += records
            cpu = time.process_time() - cpu0
            pg_cpu = sum(cpu_seconds(p) for p in pg) - pg0
            groups = store.groups.groups - groups0
            batches = ROUNDS * size
            lines.append(
                f"groups of {size}: {groups} transactions for {batches} batches"
                f" ({time.time() - t0:.1f} s); CPU per group (µs): this process"
                f" {1e6 * cpu / groups:.0f}, PostgreSQL {1e6 * pg_cpu / groups:.0f};"
                f" per batch: {1e6 * cpu / batches:.0f}, {1e6 * pg_cpu / batches:.0f};"
                f" loadavg {load0} -> {loadavg()}"
            )
        stored = await pool.fetchval(
            "SELECT count(*) FROM metric_points p JOIN metric_series s ON s.id = p.series_id"
            " WHERE s.member_id = ANY($1::text[])",
            [s.member_id for s in scopes],
        )
        sent = POINTS * (len(scopes) + ROUNDS * sum(GROUPS))
        assert stored == sent, f"{stored} points stored, {sent} sent"
    finally:
        await pool.close()
    return lines


async def _job(url: str) -> str:
    pool = await create_pool(url, max_size=1)
    try:
        return str(await pool.fetchval("SELECT id FROM jobs ORDER BY created_at DESC LIMIT 1"))
    finally:
        await pool.close()


def member_scopes(url: str, members: int) -> list[MemberScope]:
    """``members`` members of one running job (``add_members``), as their tokens scope them."""
    rows = asyncio.run(add_members(url, members))
    job = asyncio.run(_job(url))
    return [
        MemberScope(job, str(m["attempt"]), str(m["member"]), int(str(m["index"]))) for m in rows
    ]


@pytest.mark.timeout(1800)
def test_group_commit_cost(durable_pg: tuple[str, int]) -> None:  # noqa: F811
    url, postmaster = durable_pg
    scopes = member_scopes(url, max(GROUPS))
    print(f"\n{POINTS} points a batch, {ROUNDS} rounds per group size")
    for line in uvloop.run(measure(url, postmaster, scopes)):  # the gateway's loop
        print(line)
