"""The rollups' fold alone: 10 s of 2,000 streams' deltas folded in one statement, against the
same folded in slices of series (``fold_slice``, as the gateway does since session 43); not part
of the suite.

Each round ingests ``BENCH_SECONDS`` (10) "seconds" of batches (one batch of ``BENCH_POINTS``
(100) points per member and second, ``BENCH_MEMBERS`` (2,000) members, 4 tags: the streams
bench's load) through the store's group commit, with the gateway's folds off, then folds what
is pending: ``one`` folds it all in one statement (the gateway's fold before session 43:
``fold_oldest``), ``slices`` in the gateway's slices (``fold_slice``, a twentieth of the series
each; ``BENCH_SLICES`` another number). Per fold
statement: how long it took and the CPU of its PostgreSQL backend (/proc); in all, the CPU per
delta. Rounds alternate ``one`` and ``slices`` (``BENCH_ROUNDS`` pairs). At the end the
coarsest rollup tier of every series is checked against what was sent.

Run: ``.venv/bin/pytest tests/bench/bench_metric_folds.py -m bench -s``
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from datetime import UTC, datetime

import pytest
import uvloop

from adapters.postgres.metric_rollups import FOLD_SECONDS, FOLD_TICK, fold_oldest, fold_slice
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from domain.telemetry import STORED_TIERS, MemberScope
from domain.telemetry_ports import CollectorCounters
from tests.bench.bench_metric_groups import TAGS, a_batch, member_scopes
from tests.bench.bench_telemetry_streams import durable_pg  # noqa: F401 - a fixture
from tests.bench.proc_stats import cpu_seconds, loadavg

pytestmark = pytest.mark.bench

MEMBERS = int(os.environ.get("BENCH_MEMBERS", "2000"))
POINTS = int(os.environ.get("BENCH_POINTS", "100"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
SLICES = int(os.environ.get("BENCH_SLICES", round(FOLD_SECONDS / FOLD_TICK)))  # the gateway's


async def measure(url: str, scopes: list[MemberScope]) -> list[str]:
    pool = await create_pool(url, min_size=8, max_size=8)
    folds = await create_pool(url, min_size=1, max_size=1)  # one backend: its CPU is the fold's
    fold_pid = int(await folds.fetchval("SELECT pg_backend_pid()"))
    store = PostgresMetrics(pool)
    store.groups.folder.every = math.inf  # folded by hand below
    records = POINTS // len(TAGS)
    first = 0
    lines = []
    try:
        for way in ["one", "slices"] * ROUNDS:
            for _ in range(SECONDS):  # a batch per member and second, as the streams send
                now, batch = datetime.now(UTC), a_batch(first, records)
                await asyncio.gather(
                    *(store.append(s, [batch], CollectorCounters(), now) for s in scopes)
                )
                first += records
            pending = int(await pool.fetchval("SELECT count(*) FROM metric_rollup_deltas"))
            series = int(await pool.fetchval(
                "SELECT count(DISTINCT series_id) FROM metric_rollup_deltas"
            ))  # fmt: skip
            load0, walls, cpus = loadavg(), [], []
            cursor, per = 0, -(-series // SLICES)
            while True:
                cpu0, t0 = cpu_seconds(fold_pid), time.perf_counter()
                if way == "one":
                    done = await fold_oldest(folds, limit=10**9)
                else:
                    done = await fold_slice(folds, cursor, per)
                walls.append(time.perf_counter() - t0)
                cpus.append(cpu_seconds(fold_pid) - cpu0)
                assert done is not None
                if way == "one" or done.series < per:
                    break
                cursor = done.last
            left = int(await pool.fetchval("SELECT count(*) FROM metric_rollup_deltas"))
            assert left == 0, f"{left} deltas left"
            lines.append(
                f"{way:6}: {pending:,} deltas of {series:,} series in {len(walls)} statement(s);"
                f" longest {max(walls) * 1000:.0f} ms (PostgreSQL CPU {max(cpus) * 1000:.0f} ms),"
                f" all {sum(walls) * 1000:.0f} ms (CPU {sum(cpus) * 1000:.0f} ms,"
                f" {1e6 * sum(cpus) / pending:.1f} µs a delta); loadavg {load0} -> {loadavg()}"
            )
        wrong = await pool.fetchval(
            "SELECT count(*) FROM metric_series s LEFT JOIN metric_rollups r ON r.series_id = s.id"
            " AND r.width = $1 AND r.bucket = 0 WHERE s.member_id = ANY($2::text[])"
            " AND (r.count IS DISTINCT FROM $3 OR r.first_step <> 0 OR r.last_step <> $3 - 1)",
            STORED_TIERS[-1],
            [s.member_id for s in scopes],
            first,
        )
        assert wrong == 0, f"{wrong} series' rollups differ from what was sent"
    finally:
        await pool.close()
        await folds.close()
    return lines


@pytest.mark.timeout(3600)
def test_fold_in_one_or_in_slices(durable_pg: tuple[str, int]) -> None:  # noqa: F811
    url, _ = durable_pg
    scopes = member_scopes(url, MEMBERS)
    print(f"\n{MEMBERS:,} members x {POINTS} points x {SECONDS} s of batches per fold")
    for line in uvloop.run(measure(url, scopes)):
        print(line)
