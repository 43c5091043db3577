"""Bounded metric queries over a long series (not part of the suite).

One series of ``BENCH_POINTS`` points (10,000,000: one value per step) is stored through the
metrics store (raw points and rollups, as the telemetry gateway writes them). Then, in the same
run: a 1,000-point view of the whole series and of random 1,000,000-step zoom windows, timed
three ways: the store call as the API process makes it (one round trip on loopback), the
server's own execution time (``EXPLAIN (ANALYZE)``), and ``GET /v1/jobs/{id}/metrics/curve``
through the API app in process. The baseline is what a store without rollups would do for the
same answer: 1,000 buckets computed from the raw points of the window (``GROUP BY``).

Run: ``.venv/bin/pytest tests/bench/bench_telemetry_queries.py -m bench -s``
(``BENCH_POINTS``, default 10000000; ``BENCH_QUERIES``, 200).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.uow import PostgresUnitOfWork
from application.auth import bootstrap_admin
from domain.telemetry import MemberScope, View, plan_view
from domain.telemetry_ports import CollectorCounters
from entrypoints.api.app import create_app
from tests.contract.builders import a_job, a_member, an_attempt
from tests.support.asgi import asgi_transport
from tests.support.context import memory_context
from tests.support.points import source_batch

pytestmark = pytest.mark.bench

POINTS = int(os.environ.get("BENCH_POINTS", "10000000"))
QUERIES = int(os.environ.get("BENCH_QUERIES", "200"))
BATCH = 50_000
WINDOW = 1_000_000
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def ms(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1000:.2f} ms, p99 {pct(xs, 0.99) * 1000:.2f} ms"


async def test_bounded_queries(tmp_path: Path, pg_url: str, pg_engine: AsyncEngine) -> None:
    job, attempt = a_job(), None
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        attempt = an_attempt(job, 1)
        await uow.attempts.add(attempt)
        member = a_member(attempt, 0)
        await uow.members.add(member)
        await uow.commit()
    scope = MemberScope(job.id, attempt.id, member.id, 0)
    pool = await create_pool(pg_url, max_size=2)
    store = PostgresMetrics(pool)
    rng = random.Random(1)
    t0 = time.perf_counter()
    for start in range(0, POINTS, BATCH):
        steps = list(range(start, min(POINTS, start + BATCH)))
        b = source_batch(
            "events#0", "tfevents", ["train/loss"] * len(steps), [s * 40 for s in steps], steps,
            [1.7e9 + s * 0.01 for s in steps],
            [1.0 / (1 + s / 1000) + rng.random() * 0.01 for s in steps],
        )  # fmt: skip
        await store.append(scope, [b], CollectorCounters(), NOW)
    load = time.perf_counter() - t0
    await pool.execute("VACUUM ANALYZE metric_blocks")
    await pool.execute("VACUUM ANALYZE metric_rollups")
    (series,) = await store.series(job.id)

    async def timed(view: View) -> tuple[float, int]:
        t = time.perf_counter()
        buckets = await store.view(series.id, view)
        return time.perf_counter() - t, len(buckets)

    async def server_ms(view: View) -> float:
        sql = (
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM metric_rollups WHERE series_id = $1"
            " AND width = $2 AND bucket BETWEEN $3 AND $4 ORDER BY bucket"
        )
        plan = await pool.fetchval(
            sql, series.id, view.width, view.start // view.width, view.end // view.width
        )
        return float(json.loads(plan)[0]["Execution Time"]) / 1000

    full = plan_view(0, POINTS - 1, 1000)
    windows = [rng.randrange(0, POINTS - WINDOW) for _ in range(QUERIES)]
    zooms = [plan_view(w, w + WINDOW - 1, 1000) for w in windows]
    _, full_n = await timed(full)  # and warm
    full_t, zoom_t, full_s, zoom_s, zoom_n = [], [], [], [], []
    for zoom in zooms:
        t, _ = await timed(full)
        full_t.append(t)
        t, n = await timed(zoom)
        zoom_t.append(t)
        zoom_n.append(n)
        full_s.append(await server_ms(full))
        zoom_s.append(await server_ms(zoom))
    narrow_t, raw_view_t = [], []  # views read from raw blocks: 8,000 steps (width 8), 1,000 (raw)
    for w in windows[:50]:
        narrow_t.append((await timed(plan_view(w, w + 7_999, 1000)))[0])
        raw_view_t.append((await timed(plan_view(w, w + 999, 1000)))[0])
    raw_t = []
    for w in windows[:10]:  # the baseline: 1,000 buckets from the raw points of the window
        t = time.perf_counter()
        await pool.fetch(  # the window's blocks only, as the store reads raw points
            "SELECT u.step / 1000, min(u.value), max(u.value), avg(u.value) FROM metric_blocks b,"
            " unnest(b.steps, b.vals) AS u(step, value) WHERE b.series_id = $1"
            " AND b.bucket BETWEEN $2::bigint / 4096 AND $3::bigint / 4096"
            " AND u.step BETWEEN $2 AND $3 GROUP BY 1 ORDER BY 1",
            series.id,
            w,
            w + WINDOW - 1,
        )
        raw_t.append(time.perf_counter() - t)

    ctx = dataclasses.replace(
        memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine), metrics=store
    )
    headers = {"Authorization": f"Bearer {await bootstrap_admin(ctx)}"}
    app = create_app(ctx, supervise=False)
    http_t = []
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://t", headers=headers
    ) as client:
        for w in windows[:50]:
            t = time.perf_counter()
            r = await client.get(
                f"/v1/jobs/{job.id}/metrics/curve",
                params={"tag": "train/loss", "start": w, "end": w + WINDOW - 1},
            )
            http_t.append(time.perf_counter() - t)
            assert r.status_code == 200 and len(r.json()["merged"]) <= 1000
    await pool.close()
    print(
        f"\nseries of {POINTS:,} points stored in {load:.1f} s ({POINTS / load:,.0f} points/s"
        " in process, 50,000-point batches)"
        f"\nfull view: {full_n} buckets of {full.width} steps;"
        f" store call {ms(full_t)}; server {ms(full_s)}"
        f"\n1M-step zoom: {statistics.median(zoom_n):.0f} buckets of {zooms[0].width} steps;"
        f" store call {ms(zoom_t)}; server {ms(zoom_s)}"
        f"\n8,000-step zoom (width 8, from raw blocks): store call {ms(narrow_t)}"
        f"\n1,000-step zoom (raw points): store call {ms(raw_view_t)}"
        f"\nGET …/metrics/curve (1M zoom, in-process ASGI): {ms(http_t)}"
        f"\nbaseline, 1,000 buckets from the window's raw points: {ms(raw_t)}"
        f" (ratio to the store call p50: {pct(raw_t, 0.5) / pct(zoom_t, 0.5):.0f}x)"
    )
