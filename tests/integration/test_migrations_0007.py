"""Migration 0007 moves raw scalars from a row per point (metric_points) into blocks of arrays
(metric_blocks, one per series and 4096-step bucket, sorted by step and record offset), keeps
``metric_points`` as a view over them, and downgrades back to rows with nothing lost."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration

# (series, step, wall time, value, record offset); two series, two buckets, a step logged twice
POINTS = [
    (1, 7, 1.5, 0.5, 40),
    (1, 7, 1.6, 0.4, 90),
    (1, 4095, 2.5, float("nan"), 80),
    (1, 4096, 3.5, 1.0, 120),
    (2, 3, 4.5, -2.0, 10),
]


async def test_points_move_into_blocks_and_back(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0006")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await conn.copy_records_to_table("metric_points", records=list(reversed(POINTS)))
        await migrate.upgrade_async(empty_db, "0007")
        blocks = await conn.fetch(
            "SELECT series_id, bucket, steps, offsets FROM metric_blocks ORDER BY 1, 2"
        )
        assert [tuple(b) for b in blocks] == [
            (1, 0, [7, 7, 4095], [40, 90, 80]),
            (1, 1, [4096], [120]),
            (2, 0, [3], [10]),
        ]
        storage = await conn.fetch(
            "SELECT attname, attstorage FROM pg_attribute"
            " WHERE attrelid = 'metric_blocks'::regclass"
            " AND attname IN ('steps', 'walls', 'vals', 'offsets')"
        )
        assert {r["attstorage"] for r in storage} == {b"e"}  # out of line, never compressed
        view = await conn.fetch("SELECT * FROM metric_points ORDER BY 1, 2, 5")
        assert [repr(tuple(r)) for r in view] == [repr(p) for p in POINTS]

        await migrate.downgrade_async(empty_db, "0006")
        rows = await conn.fetch("SELECT * FROM metric_points ORDER BY 1, 2, 5")
        assert [repr(tuple(r)) for r in rows] == [repr(p) for p in POINTS]
        kind = await conn.fetchval("SELECT relkind FROM pg_class WHERE relname = 'metric_points'")
        assert kind == b"r"  # a table again
    finally:
        await conn.close()
