"""Telemetry ingest end to end against raw COPY, in one run (not part of the suite).

(a) The baseline: the same points COPYed straight into the same PostgreSQL with asyncpg
    (``copy_records_to_table``, 10,000-row batches sorted by series, into a narrow table with a
    (series, step) index), one connection: the fastest way to put them there.
(b) TunePlane: the files (JSONL for half of the members, TensorBoard event files for the other
    half, 4 scalars per record) → ``tp collector`` (one process per member, as on 8 hosts) →
    ``tp gateway telemetry`` (TLS) → PostgreSQL, with deduplication, rollups and latest values.
    The gateway and the collectors run idle first; the clock starts when the files appear in the
    members' metrics directories and stops when the last point is stored.

Everything shares the same 2 cores: in (b) the collectors parse and spool, the gateway decodes
and aggregates, and PostgreSQL writes, at the same time.

Run: ``.venv/bin/pytest tests/bench/bench_telemetry_ingest.py -m bench -s``
(``BENCH_RECORDS``: records per member, default 31,250: 1,000,000 points in all).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.support.db import plain_dsn
from tests.support.telemetry_rig import TAGS, Rig, value_at

pytestmark = pytest.mark.bench

MEMBERS = 8
RECORDS = int(os.environ.get("BENCH_RECORDS", "31250"))


async def raw_copy(url: str, members: int, records: int) -> float:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        await conn.execute(
            "CREATE TABLE bench_points (series bigint NOT NULL, step bigint NOT NULL,"
            " wall_time float8 NOT NULL, value float8 NOT NULL);"
            "CREATE INDEX ON bench_points (series, step)"
        )
        rows = [
            (m * 4 + k, step, 1.7e9 + step, value_at(m, step, k))
            for m in range(members)
            for k in range(len(TAGS))
            for step in range(records)
        ]  # already sorted by series, then step
        t0 = time.perf_counter()
        for i in range(0, len(rows), 10_000):
            await conn.copy_records_to_table(
                "bench_points",
                records=rows[i : i + 10_000],
                columns=["series", "step", "wall_time", "value"],
            )
        return time.perf_counter() - t0
    finally:
        await conn.close()


async def test_ingest_against_raw_copy(tmp_path: Path, pg_url: str, pg_engine: AsyncEngine) -> None:
    points = MEMBERS * RECORDS * len(TAGS)
    a = await raw_copy(pg_url, MEMBERS, RECORDS)
    rig = Rig(tmp_path, pg_url)
    await rig.add_members(pg_engine, MEMBERS)
    rig.write(RECORDS)
    sizes = sum(m.path.stat().st_size for m in rig.members)
    staged = [m.path.rename(tmp_path / f"staged-{i}") for i, m in enumerate(rig.members)]
    try:
        rig.start_gateway()
        for i in range(MEMBERS):
            rig.start_collector(i)
        await asyncio.sleep(5)  # gateway and collectors started and idle before the clock
        t0 = time.perf_counter()
        for m, path in zip(rig.members, staged, strict=True):
            path.rename(m.path)  # the files appear at once, as if written in a burst
        await rig.wait_stored(within=600, every=0.02)
        b = time.perf_counter() - t0
    finally:
        rig.stop()
    assert await rig.mismatches() == []
    print(
        f"\n{points:,} points ({MEMBERS} members x {RECORDS:,} records x {len(TAGS)} scalars;"
        f" {sizes / 1e6:.1f} MB of files)"
        f"\n(a) raw asyncpg COPY: {a:.2f} s = {points / a:,.0f} points/s"
        f"\n(b) files -> collectors -> gateway -> PostgreSQL: {b:.2f} s"
        f" = {points / b:,.0f} points/s"
        f"\n(b)/(a) = {a / b:.2f}"
    )
