"""The metrics store on PostgreSQL (``domain.telemetry_ports.MetricsStore``), on asyncpg directly.

Ingest (``metric_groups.py``) stores the batches that arrive together, from many streams, in one
transaction: lock each source's watermark row, keep only the records above it, create missing
series, COPY the raw points (sorted by series and step: the B-tree index grows at its right
edge, see shared perf notes) and the rollups' deltas (folded into ``metric_rollups`` off the
ack path, and by each reader for its series first: ``metric_rollups.py``), update the series'
latest values and raise the watermarks. A resent batch therefore stores nothing twice.

Queries read at most one row per bucket. asyncpg prepares statements; after five executions
PostgreSQL may switch a prepared statement to a generic plan, which is much slower for these
range queries, so the pool sets ``plan_cache_mode = force_custom_plan`` (``metrics_pool.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from adapters.postgres.ingest_arrays import BLOCK_STEPS
from adapters.postgres.metric_groups import Coalesced, GroupedAppends
from adapters.postgres.metric_rollups import fold_series
from domain.lifecycle import AttemptState
from domain.telemetry import (
    STORED_TIERS,
    Appended,
    Bucket,
    MemberScope,
    SourceBatch,
    View,
    point_bucket,
)
from domain.telemetry_ports import (
    CollectorCounters,
    MemberStatus,
    RawPoint,
    SeriesInfo,
    TelemetryCounts,
)

ENDED = {AttemptState.SUCCEEDED.value, AttemptState.FAILED.value, AttemptState.CANCELLED.value}
_NO_STEP = 2**63 - 1

# The raw points of series $1 with steps $2 … $3: the blocks of those buckets, unnested.
_POINTS = f"""
SELECT u.step, u.wall_time, u.value, u.record_offset
FROM metric_blocks b, unnest(b.steps, b.walls, b.vals, b.offsets)
    AS u(step, wall_time, value, record_offset)
WHERE b.series_id = $1
    AND b.bucket BETWEEN $2::bigint / {BLOCK_STEPS} AND $3::bigint / {BLOCK_STEPS}
    AND u.step BETWEEN $2 AND $3
"""

_AGGREGATE_RAW = f"""
SELECT step / $4 AS bucket, min(step), max(step),
    min(value) FILTER (WHERE value NOT IN ('NaN', 'Infinity', '-Infinity')),
    max(value) FILTER (WHERE value NOT IN ('NaN', 'Infinity', '-Infinity')),
    coalesce(sum(value) FILTER (WHERE value NOT IN ('NaN', 'Infinity', '-Infinity')), 0),
    count(*) FILTER (WHERE value NOT IN ('NaN', 'Infinity', '-Infinity')),
    (array_agg(value ORDER BY step DESC, record_offset DESC))[1],
    min(wall_time), max(wall_time)
FROM ({_POINTS}) p
GROUP BY step / $4 ORDER BY 1
"""

_LATEST_RAW = f"""
SELECT DISTINCT ON (step) step, wall_time, value FROM ({_POINTS}) p
ORDER BY step, record_offset DESC
"""

# A time range → steps, by the finest stored tier's wall-time indexes (partial: its rows only)
# and at most one bucket's raw points at each end (wall time grows with the step within a
# series, as writers log).
_FIRST_STEP_AT = f"""
WITH r AS (SELECT first_step, last_step FROM metric_rollups WHERE series_id = $1
    AND width = {STORED_TIERS[0]} AND max_wall >= $2 ORDER BY max_wall LIMIT 1)
SELECT min(u.step) FROM r, metric_blocks b, unnest(b.steps, b.walls) AS u(step, wall_time)
WHERE b.series_id = $1
    AND b.bucket BETWEEN r.first_step / {BLOCK_STEPS} AND r.last_step / {BLOCK_STEPS}
    AND u.step BETWEEN r.first_step AND r.last_step AND u.wall_time >= $2
"""
_LAST_STEP_AT = f"""
WITH r AS (SELECT first_step, last_step FROM metric_rollups WHERE series_id = $1
    AND width = {STORED_TIERS[0]} AND min_wall <= $2 ORDER BY min_wall DESC LIMIT 1)
SELECT max(u.step) FROM r, metric_blocks b, unnest(b.steps, b.walls) AS u(step, wall_time)
WHERE b.series_id = $1
    AND b.bucket BETWEEN r.first_step / {BLOCK_STEPS} AND r.last_step / {BLOCK_STEPS}
    AND u.step BETWEEN r.first_step AND r.last_step AND u.wall_time <= $2
"""

_RAW_PAGE = f"""
SELECT step, wall_time, value, record_offset FROM ({_POINTS}) p
WHERE step > $2 OR record_offset > $4 ORDER BY step, record_offset LIMIT $5
"""
_NEXT_BLOCK = "SELECT min(bucket) FROM metric_blocks WHERE series_id = $1 AND bucket >= $2"
RAW_WINDOW = 8 * BLOCK_STEPS  # steps the raw inspector reads a page from at a time


class PostgresMetrics:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.groups = GroupedAppends(pool)  # batches of many streams, one transaction
        self.statuses = Coalesced(self._statuses)  # members' statuses, many in one query

    async def member_status(self, member_id: str) -> MemberStatus | None:
        """Read together with every other member's asked for meanwhile: one query for all (at
        thousands of streams opening at once, a query each starved the pool that the ingest
        transactions need)."""
        return await self.statuses.read(member_id)

    async def _statuses(self, member_ids: list[str]) -> dict[str, MemberStatus]:
        rows = await self.pool.fetch(
            "SELECT m.id, a.job_id, m.attempt_id, m.index, a.state, a.updated_at FROM members m"
            " JOIN attempts a ON a.id = m.attempt_id WHERE m.id = ANY($1::text[])",
            member_ids,
        )
        return {
            r["id"]: MemberStatus(
                r["job_id"],
                r["attempt_id"],
                r["index"],
                r["state"],
                r["updated_at"] if r["state"] in ENDED else None,
            )
            for r in rows
        }

    async def append(
        self,
        scope: MemberScope,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
        now: datetime,
    ) -> Appended:
        return await self.groups.append(scope, batches, counters, now)

    async def series(self, job_id: str, tags: Sequence[str] | None = None) -> list[SeriesInfo]:
        rows = await self.pool.fetch(
            "SELECT s.id, s.attempt_id, a.number, s.member_id, m.index, s.source, s.tag,"
            " s.first_step, s.last_step, s.count, s.last_value, s.last_wall"
            " FROM metric_series s JOIN attempts a ON a.id = s.attempt_id"
            " JOIN members m ON m.id = s.member_id"
            " WHERE s.job_id = $1 AND s.count > 0 AND ($2::text[] IS NULL OR s.tag = ANY($2))"
            " ORDER BY s.tag, a.number, m.index, s.source",
            job_id,
            list(tags) if tags is not None else None,
        )
        return [SeriesInfo(*row.values()) for row in rows]

    async def view(self, series_id: int, view: View) -> list[Bucket]:
        await fold_series(self.pool, series_id)  # what was acked, in the rollups too
        if not view.raw and not view.stored:  # at most 8 × points raw rows, aggregated
            rows = await self.pool.fetch(
                _AGGREGATE_RAW, series_id, view.start, view.end, view.width
            )
            return [Bucket(*row.values()) for row in rows]
        if view.raw:
            rows = await self.pool.fetch(_LATEST_RAW, series_id, view.start, view.end)
            return [point_bucket(r["step"], r["wall_time"], r["value"], 1) for r in rows]
        rows = await self.pool.fetch(
            "SELECT bucket, first_step, last_step, minimum, maximum, total, count, last,"
            " min_wall, max_wall FROM metric_rollups"
            " WHERE series_id = $1 AND width = $2 AND bucket BETWEEN $3 AND $4 ORDER BY bucket",
            series_id,
            view.width,
            view.start // view.width,
            view.end // view.width,
        )
        return [Bucket(*row.values()) for row in rows]

    async def steps_between(
        self, series_id: int, start_time: float, end_time: float
    ) -> tuple[int, int] | None:
        await fold_series(self.pool, series_id)
        lo = await self.pool.fetchval(_FIRST_STEP_AT, series_id, start_time)
        hi = await self.pool.fetchval(_LAST_STEP_AT, series_id, end_time)
        if lo is None or hi is None or lo > hi:
            return None
        return int(lo), int(hi)

    async def raw(
        self, series_id: int, start: int, end: int, after_offset: int, limit: int
    ) -> list[RawPoint]:
        """A page of raw points from ``start`` (past ``after_offset`` at that step), read a
        window of ``RAW_WINDOW`` steps at a time: a wide range never unnests all its blocks."""
        out: list[RawPoint] = []
        lo = start
        async with self.pool.acquire() as conn:
            while lo <= end and len(out) < limit:
                hi = min(end, lo + RAW_WINDOW - 1)
                after = after_offset if lo == start else -1
                rows = await conn.fetch(_RAW_PAGE, series_id, lo, hi, after, limit - len(out))
                out += [RawPoint(*row.values()) for row in rows]
                if rows or hi >= end:
                    lo = hi + 1
                    continue
                nxt = await conn.fetchval(_NEXT_BLOCK, series_id, (hi + 1) // BLOCK_STEPS)
                if nxt is None:
                    break
                lo = max(hi + 1, nxt * BLOCK_STEPS)
        return out

    async def counts(self, job_id: str) -> list[TelemetryCounts]:
        rows = await self.pool.fetch(
            "SELECT t.member_id, t.points, t.duplicates, t.corrupt_records, t.dropped_records,"
            " t.dropped_bytes FROM telemetry_members t JOIN members m ON m.id = t.member_id"
            " JOIN attempts a ON a.id = m.attempt_id WHERE a.job_id = $1"
            " ORDER BY a.number, m.index",
            job_id,
        )
        return [TelemetryCounts(*row.values()) for row in rows]
