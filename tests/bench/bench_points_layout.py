"""Raw points a row each against blocks of arrays: PostgreSQL's CPU to COPY them (not part of the
suite; the reason for ``metric_blocks``, migration 0007).

The same 1,000,000 points (32 series × 31,250 steps, sorted by series and step), COPYed in
10,000-point batches with one connection, twice in one run: (a) a row per point into a narrow
table with a (series, step) index, as ``metric_points`` was; (b) the gateway's own payload into
``metric_blocks`` (one row per series and 4,096-step bucket, arrays stored out of line without
compression). Reported: wall time and the backend process's CPU (``/proc/PID/stat``).

Run: ``.venv/bin/pytest tests/bench/bench_points_layout.py -m bench -s``
"""

from __future__ import annotations

import io
import time

import asyncpg
import numpy as np
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.ingest_arrays import BLOCK_COLUMNS, Rows
from tests.bench.proc_stats import cpu_seconds
from tests.support.db import plain_dsn

pytestmark = pytest.mark.bench

SERIES, STEPS, BATCH = 32, 31_250, 10_000


def batches() -> list[Rows]:
    out = []
    for s in range(SERIES):
        for start in range(0, STEPS, BATCH):
            step = np.arange(start, min(STEPS, start + BATCH))
            n = len(step)
            out.append(Rows.of(np.full(n, s), step, 1.7e9 + step, step / 7.0, step * 40))
    return out


async def test_rows_against_blocks(pg_url: str, pg_engine: AsyncEngine) -> None:
    conn = await asyncpg.connect(plain_dsn(pg_url))
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await conn.execute(
            "CREATE TABLE bench_rows (series_id bigint NOT NULL, step bigint NOT NULL,"
            " wall_time float8 NOT NULL, value float8 NOT NULL, record_offset bigint NOT NULL);"
            "CREATE INDEX ON bench_rows (series_id, step)"
        )
        work = batches()
        results = {}
        for name in ("rows", "blocks"):
            cpu, t0 = cpu_seconds(pid), time.perf_counter()
            for rows in work:
                if name == "rows":
                    columns = (rows.series, rows.step, rows.wall, rows.value, rows.offset)
                    records = list(zip(*(c.tolist() for c in columns), strict=True))
                    await conn.copy_records_to_table("bench_rows", records=records)
                else:
                    await conn.copy_to_table(
                        "metric_blocks",
                        source=io.BytesIO(rows.copy_payload()),
                        columns=BLOCK_COLUMNS,
                        format="binary",
                    )
            results[name] = (time.perf_counter() - t0, cpu_seconds(pid) - cpu)
        stored = await conn.fetchval("SELECT count(*) FROM metric_points")
        assert stored == await conn.fetchval("SELECT count(*) FROM bench_rows") == SERIES * STEPS
    finally:
        await conn.close()
    (rw, rc), (bw, bc) = results["rows"], results["blocks"]
    print(
        f"\n{SERIES * STEPS:,} points in {BATCH:,}-point batches"
        f"\n(a) a row per point: {rw:.2f} s wall, backend CPU {rc:.2f} s"
        f"\n(b) blocks of arrays: {bw:.2f} s wall, backend CPU {bc:.2f} s"
        f"\nbackend CPU (a)/(b) = {rc / bc:.1f}x"
    )
