"""Merging the small raw-point blocks a slow collector makes (docs/telemetry.md).

Each collector batch stores one ``metric_blocks`` row per series and 4,096-step bucket it
touches, so a collector that ships a point at a time (a slow trickle) leaves one row per point.
Every read of that bucket then unnests a row per point. Compaction replaces all the blocks of a
(series, bucket) that has ``min_blocks`` or more with one block holding the same points sorted
by (step, record offset), in one statement: the blocks it deletes are exactly the ones it
merges (``DELETE … RETURNING`` feeds the ``INSERT``), so a batch committed meanwhile is never
lost (its new block is simply not merged this time). One compactor works at a time (a
transaction-scoped advisory lock; the others skip that pass), so several gateways never lock the
same rows in different orders. Rollups and series totals are untouched: the points are the same.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import asyncpg

from application import instruments as i
from application.instruments import NO_INSTRUMENTS, Instruments

log = logging.getLogger(__name__)

COMPACTION_LOCK = 0x7470_636F_6D70  # "tpcomp": the advisory lock one compactor holds

_COMPACT = """
WITH crowded AS (
    SELECT series_id, bucket FROM metric_blocks
    GROUP BY series_id, bucket HAVING count(*) >= $1
    ORDER BY series_id, bucket LIMIT $2
), gone AS (
    DELETE FROM metric_blocks b USING crowded c
    WHERE b.series_id = c.series_id AND b.bucket = c.bucket
    RETURNING b.series_id, b.bucket, b.steps, b.walls, b.vals, b.offsets
), merged AS (
    INSERT INTO metric_blocks (series_id, bucket, steps, walls, vals, offsets)
    SELECT g.series_id, g.bucket,
        array_agg(u.step ORDER BY u.step, u.record_offset),
        array_agg(u.wall ORDER BY u.step, u.record_offset),
        array_agg(u.value ORDER BY u.step, u.record_offset),
        array_agg(u.record_offset ORDER BY u.step, u.record_offset)
    FROM gone g, unnest(g.steps, g.walls, g.vals, g.offsets) AS u(step, wall, value, record_offset)
    GROUP BY g.series_id, g.bucket
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM merged) AS merged
"""


@dataclass(frozen=True, slots=True)
class Compacted:
    removed: int  # blocks deleted
    merged: int  # blocks written in their place (one per series and bucket)


async def compact_blocks(
    pool: asyncpg.Pool, *, min_blocks: int = 8, limit: int = 1000
) -> Compacted:
    """Merge the blocks of at most ``limit`` (series, bucket) pairs that have ``min_blocks`` or
    more; returns what it did. Call again while it merges ``limit`` pairs."""
    if min_blocks < 2 or limit < 1:
        raise ValueError("min_blocks must be at least 2 and limit at least 1")
    async with pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", COMPACTION_LOCK):
            return Compacted(0, 0)  # another gateway is compacting
        row = await conn.fetchrow(_COMPACT, min_blocks, limit)
    return Compacted(int(row["removed"]), int(row["merged"]))


async def keep_compacting(
    pool: asyncpg.Pool,
    every_seconds: float,
    *,
    min_blocks: int = 8,
    limit: int = 1000,
    instruments: Instruments = NO_INSTRUMENTS,
) -> None:
    """Compact every ``every_seconds`` (at once again while a pass is full), forever; a failed
    pass (the database away) is logged and tried again at the next period."""
    while True:
        try:
            with instruments.timer(i.COMPACTION_SECONDS):
                done = await compact_blocks(pool, min_blocks=min_blocks, limit=limit)
            instruments.inc(i.COMPACTED_BLOCKS, done.removed)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("metric block compaction failed, trying again later: %s", exc)
            done = Compacted(0, 0)
        if done.merged:
            log.info("merged %d small metric blocks into %d", done.removed, done.merged)
        if done.merged < limit:
            await asyncio.sleep(every_seconds)
