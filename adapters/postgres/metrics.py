"""The metrics store on PostgreSQL (``domain.telemetry_ports.MetricsStore``), on asyncpg directly.

Ingest is one transaction per collector batch: lock each source's watermark row, keep only the
records above it, create missing series, COPY the raw points (sorted by series and step: the
B-tree index grows at its right edge, see shared perf notes), merge the batch's rollups into
``metric_rollups`` with one ``INSERT … ON CONFLICT DO UPDATE`` over arrays, update the series'
latest values and raise the watermarks. A resent batch therefore stores nothing twice.

Queries read at most one row per bucket. asyncpg prepares statements; after five executions
PostgreSQL may switch a prepared statement to a generic plan, which is much slower for these
range queries, so the pool sets ``plan_cache_mode = force_custom_plan``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import asyncpg
import numpy as np

from adapters.postgres.engine import KEEPALIVE_SECONDS, keepalives, plain_url
from adapters.postgres.ingest_arrays import BLOCK_COLUMNS, BLOCK_STEPS, Rows
from adapters.telemetry.columns import Points
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

_MERGE_ROLLUPS = """
INSERT INTO metric_rollups AS r (series_id, width, bucket, first_step, last_step, minimum,
    maximum, total, count, last, min_wall, max_wall)
SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], $5::bigint[],
    $6::float8[], $7::float8[], $8::float8[], $9::bigint[], $10::float8[], $11::float8[],
    $12::float8[])
ON CONFLICT (series_id, width, bucket) DO UPDATE SET
    first_step = LEAST(r.first_step, EXCLUDED.first_step),
    last = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last ELSE r.last END,
    last_step = GREATEST(r.last_step, EXCLUDED.last_step),
    minimum = LEAST(r.minimum, EXCLUDED.minimum),
    maximum = GREATEST(r.maximum, EXCLUDED.maximum),
    total = r.total + EXCLUDED.total,
    count = r.count + EXCLUDED.count,
    min_wall = LEAST(r.min_wall, EXCLUDED.min_wall),
    max_wall = GREATEST(r.max_wall, EXCLUDED.max_wall)
"""

_UPDATE_SERIES = """
UPDATE metric_series s SET
    first_step = LEAST(s.first_step, u.first_step),
    last_value = CASE WHEN u.last_step >= s.last_step THEN u.last_value ELSE s.last_value END,
    last_wall = CASE WHEN u.last_step >= s.last_step THEN u.last_wall ELSE s.last_wall END,
    last_step = GREATEST(s.last_step, u.last_step),
    count = s.count + u.n
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::float8[], $5::float8[], $6::bigint[])
    AS u(id, first_step, last_step, last_value, last_wall, n)
WHERE s.id = u.id
"""

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

# A time range → steps, by the finest stored tier's wall-time indexes and at most one bucket's
# raw points at each end (wall time grows with the step within a series, as writers log).
_FIRST_STEP_AT = f"""
WITH r AS (SELECT first_step, last_step FROM metric_rollups
    WHERE series_id = $1 AND width = $2 AND max_wall >= $3 ORDER BY max_wall LIMIT 1)
SELECT min(u.step) FROM r, metric_blocks b, unnest(b.steps, b.walls) AS u(step, wall_time)
WHERE b.series_id = $1
    AND b.bucket BETWEEN r.first_step / {BLOCK_STEPS} AND r.last_step / {BLOCK_STEPS}
    AND u.step BETWEEN r.first_step AND r.last_step AND u.wall_time >= $3
"""
_LAST_STEP_AT = f"""
WITH r AS (SELECT first_step, last_step FROM metric_rollups
    WHERE series_id = $1 AND width = $2 AND min_wall <= $3 ORDER BY min_wall DESC LIMIT 1)
SELECT max(u.step) FROM r, metric_blocks b, unnest(b.steps, b.walls) AS u(step, wall_time)
WHERE b.series_id = $1
    AND b.bucket BETWEEN r.first_step / {BLOCK_STEPS} AND r.last_step / {BLOCK_STEPS}
    AND u.step BETWEEN r.first_step AND r.last_step AND u.wall_time <= $3
"""

_RAW_PAGE = f"""
SELECT step, wall_time, value, record_offset FROM ({_POINTS}) p
WHERE step > $2 OR record_offset > $4 ORDER BY step, record_offset LIMIT $5
"""
_NEXT_BLOCK = "SELECT min(bucket) FROM metric_blocks WHERE series_id = $1 AND bucket >= $2"
RAW_WINDOW = 8 * BLOCK_STEPS  # steps the raw inspector reads a page from at a time

_COUNTERS = """
INSERT INTO telemetry_members AS t (member_id, points, duplicates, corrupt_records,
    dropped_records, dropped_bytes, last_batch_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (member_id) DO UPDATE SET
    points = t.points + EXCLUDED.points,
    duplicates = t.duplicates + EXCLUDED.duplicates,
    corrupt_records = GREATEST(t.corrupt_records, EXCLUDED.corrupt_records),
    dropped_records = GREATEST(t.dropped_records, EXCLUDED.dropped_records),
    dropped_bytes = GREATEST(t.dropped_bytes, EXCLUDED.dropped_bytes),
    last_batch_at = EXCLUDED.last_batch_at
"""


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 4, keepalive_seconds: float = KEEPALIVE_SECONDS
) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        plain_url(url),
        min_size=min_size,
        max_size=max_size,
        server_settings={
            "application_name": "tuneplane-metrics",
            "plan_cache_mode": "force_custom_plan",
            **keepalives(keepalive_seconds),
        },
    )
    assert pool is not None
    return pool


class PostgresMetrics:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._series: dict[tuple[str, str, str], int] = {}  # (member, source, tag) -> id

    async def member_status(self, member_id: str) -> MemberStatus | None:
        row = await self.pool.fetchrow(
            "SELECT a.job_id, m.attempt_id, m.index, a.state, a.updated_at FROM members m"
            " JOIN attempts a ON a.id = m.attempt_id WHERE m.id = $1",
            member_id,
        )
        if row is None:
            return None
        ended = row["updated_at"] if row["state"] in ENDED else None
        return MemberStatus(row["job_id"], row["attempt_id"], row["index"], row["state"], ended)

    async def append(
        self,
        scope: MemberScope,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
        now: datetime,
    ) -> Appended:
        accepted = duplicates = 0
        fresh: dict[tuple[str, str, str], int] = {}  # series made by this transaction
        async with self.pool.acquire() as conn, conn.transaction():
            kept: list[tuple[str, Points]] = []
            marks: list[tuple[str, int]] = []
            for batch in sorted(batches, key=lambda b: b.source):  # one lock order everywhere
                points = cast(Points, batch.points)
                if not len(points):
                    continue
                mark = await self._watermark(conn, scope.member_id, batch)
                cut = int(np.searchsorted(points.offset, mark, side="right"))
                duplicates += cut
                if cut < len(points):
                    kept.append((batch.source, points.take(slice(cut, None))))
                    marks.append((batch.source, int(points.offset[-1])))
            if kept:
                accepted = await self._store(conn, scope, kept, fresh)
                await conn.execute(
                    "UPDATE telemetry_sources t SET watermark = u.mark, updated_at = $2"
                    " FROM unnest($3::text[], $4::bigint[]) AS u(source, mark)"
                    " WHERE t.member_id = $1 AND t.source = u.source",
                    scope.member_id,
                    now,
                    [s for s, _ in marks],
                    [m for _, m in marks],
                )
            await conn.execute(
                _COUNTERS,
                scope.member_id,
                accepted,
                duplicates,
                counters.corrupt_records,
                counters.dropped_records,
                counters.dropped_bytes,
                now,
            )
        # only now: a series id cached from a transaction that rolled back (a stream cancelled
        # mid-batch) would file every later point of that series under a row that is not there
        self._series.update(fresh)
        return Appended(accepted, duplicates)

    async def _watermark(self, conn: Any, member_id: str, batch: SourceBatch) -> int:
        """The source's watermark, its row made where missing and locked for the transaction
        (one round trip: an upsert that changes nothing locks the row it returns)."""
        mark: int = await conn.fetchval(
            "INSERT INTO telemetry_sources AS t (member_id, source, kind, watermark, updated_at)"
            " VALUES ($1, $2, $3, -1, now()) ON CONFLICT (member_id, source)"
            " DO UPDATE SET kind = t.kind RETURNING t.watermark",
            member_id,
            batch.source,
            batch.kind,
        )
        return mark

    async def _store(
        self,
        conn: Any,
        scope: MemberScope,
        kept: list[tuple[str, Points]],
        fresh: dict[tuple[str, str, str], int],
    ) -> int:
        ids = await self._series_ids(conn, scope, kept, fresh)
        series = [
            np.array([ids.get((source, t), -1) for t in p.tags], dtype=np.int64)[p.tag]
            for source, p in kept
        ]
        points = Rows.of(
            np.concatenate(series),
            np.concatenate([p.step for _, p in kept]),
            np.concatenate([p.wall for _, p in kept]),
            np.concatenate([p.value for _, p in kept]),
            np.concatenate([p.offset for _, p in kept]),
        )
        await conn.copy_to_table(
            "metric_blocks",
            source=io.BytesIO(points.copy_payload()),
            columns=BLOCK_COLUMNS,
            format="binary",
        )
        await conn.execute(_MERGE_ROLLUPS, *points.rollups())
        await conn.execute(_UPDATE_SERIES, *points.latest())
        return len(points)

    async def _series_ids(
        self,
        conn: Any,
        scope: MemberScope,
        kept: list[tuple[str, Points]],
        fresh: dict[tuple[str, str, str], int],
    ) -> dict[tuple[str, str], int]:
        """Ids of the batch's series, made where missing; ``fresh`` gets the ones looked up
        in this transaction (cached by the caller once it committed)."""
        wanted = {(source, p.tags[i]) for source, p in kept for i in np.unique(p.tag).tolist()}
        member = scope.member_id
        missing = [k for k in wanted if (member, *k) not in self._series]
        if missing:
            await conn.execute(
                "INSERT INTO metric_series (job_id, attempt_id, member_id, source, tag,"
                " first_step, last_step, count, last_value, last_wall)"
                " SELECT $1, $2, $3, u.source, u.tag, $6, -1, 0, 'NaN', 0"
                " FROM unnest($4::text[], $5::text[]) AS u(source, tag)"
                " ON CONFLICT (member_id, source, tag) DO NOTHING",
                scope.job_id,
                scope.attempt_id,
                member,
                [s for s, _ in missing],
                [t for _, t in missing],
                _NO_STEP,
            )
            found = await conn.fetch(
                "SELECT s.id, s.source, s.tag FROM metric_series s"
                " JOIN unnest($2::text[], $3::text[]) AS u(source, tag)"
                " ON s.source = u.source AND s.tag = u.tag WHERE s.member_id = $1",
                member,
                [s for s, _ in missing],
                [t for _, t in missing],
            )
            for row in found:
                fresh[(member, row["source"], row["tag"])] = row["id"]
        return {k: self._series.get((member, *k)) or fresh[(member, *k)] for k in wanted}

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
        width = STORED_TIERS[0]
        lo = await self.pool.fetchval(_FIRST_STEP_AT, series_id, width, start_time)
        hi = await self.pool.fetchval(_LAST_STEP_AT, series_id, width, end_time)
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
