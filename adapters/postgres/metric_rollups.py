"""Rollups folded in off the ack path (docs/telemetry.md, "Rollups"; migration 0033).

A batch's transaction appends only its finest stored tier's rollup rows (``STORED_TIERS[0]``,
a row or two per series) to ``metric_rollup_deltas``, by binary COPY, instead of merging all
nine tiers into ``metric_rollups`` (about 37 ``INSERT … ON CONFLICT DO UPDATE`` rows per batch
of 100 points, each a new row version and three index entries: PostgreSQL's largest cost at
thousands of streams). A *fold* deletes pending deltas and merges them into every stored tier,
in one statement (``DELETE … RETURNING`` feeds the ``INSERT``), so a delta is merged exactly
once and a delta committed meanwhile waits for the next fold. Several deltas of one series and
bucket fold into one row per tier: a series' coarse buckets (one row per tier for 8**4 steps and
more) are written once per fold instead of once per batch.

Who folds: the telemetry gateway, a *slice* every ``FOLD_TICK`` (0.5 s) while batches arrive:
every pending delta of the next series in id order after the last slice's (``fold_slice``), so
many series that a round of slices over all of them takes about ``FOLD_SECONDS`` (a series is
folded about that often, as when one fold took everything every ``FOLD_SECONDS``, but the work
comes a twentieth at a time instead of in one burst of PostgreSQL CPU that stalled the acks); and
every reader of rollups, for the one series it reads, first (``fold_series``): a query sees what
was acked before it, exactly as when rollups were merged at ingest. Folds take one
transaction-scoped advisory lock: the gateway's skip a slice while another runs (another
gateway's or a reader's), readers wait for it. A fold takes all of a series' deltas that its
snapshot sees, or (``fold_oldest``) the oldest by ``seq``: either way a prefix of each series'
own, since ``seq`` follows commit order within a series (its source's watermark row serialises
its batches); so a series' deltas are merged in order, and the "last value" of a bucket is the
later batch's on a tie of steps, as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import asyncpg

from domain.telemetry import STORED_TIERS

log = logging.getLogger(__name__)

FOLD_LOCK = 0x7470_666F_6C64  # "tpfold": one fold at a time
FOLD_SECONDS = 10.0  # a round of slices: how often the gateway folds each series
FOLD_TICK = 0.5  # how often the gateway folds a slice while batches arrive
FOLD_ROWS = 200_000  # deltas folded in one transaction at most (a slice: the next is smaller)
MIN_SLICE = 64  # series in a slice at least (few series: all of them each tick)

_MERGE = """
, f AS (  -- the finest stored tier: a series' deltas of one bucket into one row
    SELECT series_id, bucket, min(first_step) AS first_step, max(last_step) AS last_step,
        min(NULLIF(minimum, 'NaN')) AS minimum, max(NULLIF(maximum, 'NaN')) AS maximum,
        sum(total) AS total, sum(count) AS count,
        (array_agg(last ORDER BY last_step DESC, seq DESC))[1] AS last,
        min(min_wall) AS min_wall, max(max_wall) AS max_wall
    FROM d GROUP BY series_id, bucket
), t AS (  -- every stored tier from it (its buckets' steps do not overlap)
    SELECT f.series_id, w.width, f.first_step / w.width AS bucket,
        min(f.first_step) AS first_step, max(f.last_step) AS last_step,
        min(f.minimum) AS minimum, max(f.maximum) AS maximum, sum(f.total) AS total,
        sum(f.count) AS count, (array_agg(f.last ORDER BY f.last_step DESC))[1] AS last,
        min(f.min_wall) AS min_wall, max(f.max_wall) AS max_wall
    FROM f, unnest($2::int[]) AS w(width)
    GROUP BY 1, 2, 3
), merged AS (
    INSERT INTO metric_rollups AS r (series_id, width, bucket, first_step, last_step, minimum,
        maximum, total, count, last, min_wall, max_wall)
    SELECT * FROM t ORDER BY series_id, width, bucket
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
    RETURNING 1
)
SELECT (SELECT count(*) FROM d) AS deltas, (SELECT count(*) FROM merged) AS merged
"""
_FOLD_OLDEST = (
    "WITH d AS (DELETE FROM metric_rollup_deltas WHERE seq IN"
    " (SELECT seq FROM metric_rollup_deltas ORDER BY seq LIMIT $1) RETURNING *)" + _MERGE
)  # the oldest deltas: for each series a prefix of its own, in order
_FOLD_SERIES = (
    "WITH d AS (DELETE FROM metric_rollup_deltas WHERE series_id = $1 RETURNING *)" + _MERGE
)
# a slice: the next $3 series with deltas after series $1, each with every delta the snapshot
# sees (a prefix of its own): the deltas of ids from $1 to the last of them, one range of the
# index on series_id (``IN (…)`` read the whole table each time); the last id for the next one
_FOLD_SLICE = (
    "WITH s AS MATERIALIZED (SELECT DISTINCT series_id FROM metric_rollup_deltas"
    " WHERE series_id > $1 ORDER BY series_id LIMIT $3),"
    " d AS (DELETE FROM metric_rollup_deltas WHERE series_id > $1"
    " AND series_id <= (SELECT max(series_id) FROM s) RETURNING *)"
    + _MERGE.rstrip()
    + ", (SELECT count(*) FROM s) AS series, (SELECT max(series_id) FROM s) AS last"
)
_PENDING = "SELECT EXISTS (SELECT FROM metric_rollup_deltas WHERE series_id = $1)"
_PENDING_SERIES = (
    "SELECT count(*) FROM (SELECT DISTINCT series_id FROM metric_rollup_deltas"
    " WHERE series_id > $1) s"
)
_WIDTHS = list(STORED_TIERS)


@dataclass(frozen=True, slots=True)
class Folded:
    deltas: int  # delta rows folded
    merged: int  # rollup rows written (one per series, tier and bucket)
    series: int = 0  # series folded (a slice)
    last: int = 0  # the highest series id folded (a slice; 0: none)


async def fold_oldest(pool: asyncpg.Pool, limit: int = FOLD_ROWS) -> Folded | None:
    """Fold the oldest ``limit`` deltas; None when another fold holds the lock (skipped)."""
    async with pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_LOCK):
            return None
        row = await conn.fetchrow(_FOLD_OLDEST, limit, _WIDTHS)
    return Folded(int(row["deltas"]), int(row["merged"]))


async def fold_slice(pool: asyncpg.Pool, after: int, series: int) -> Folded | None:
    """Fold every pending delta of the next ``series`` series with deltas whose id is above
    ``after``; None when another fold holds the lock (skipped)."""
    async with pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", FOLD_LOCK):
            return None
        row = await conn.fetchrow(_FOLD_SLICE, after, _WIDTHS, series)
    return Folded(int(row["deltas"]), int(row["merged"]), int(row["series"]), int(row["last"] or 0))


async def fold_series(pool: asyncpg.Pool, series_id: int) -> None:
    """Fold the series' pending deltas before its rollups are read (nothing to do, one
    index probe)."""
    if not await pool.fetchval(_PENDING, series_id):
        return
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", FOLD_LOCK)
        await conn.fetchrow(_FOLD_SERIES, series_id, _WIDTHS)


@dataclass
class Folder:
    """The gateway's folds: ``due()`` after each committed group; one slice at a time.

    Slices go round the series with deltas in id order (``cursor``: the last one folded). A
    round starts by counting the series with deltas (one pass over ``series_id``'s index) and
    asks each slice for a ``rounds``-th of them, so each series is folded about every
    ``rounds`` ticks and each tick folds about as much. A round ends when a slice finds fewer
    series than it asked for (the end of the ids). Four times a round it counts the series left
    past its cursor and, if more came than it counted (thousands of streams starting), asks
    for enough to fold them in the ticks left of the round (a quarter round once it has run
    over). A slice of more than ``FOLD_ROWS`` deltas (a backlog) makes the next ones of its
    round smaller in proportion."""

    pool: asyncpg.Pool
    every: float = FOLD_TICK
    rounds: int = round(FOLD_SECONDS / FOLD_TICK)  # slices in a round
    least: int = MIN_SLICE  # series a slice asks for at least
    per_slice: int = MIN_SLICE  # series a slice asks for (set as a round starts)
    cursor: int = 0  # the last series id folded (0: a round starts)
    slices: int = 0  # slices in this round so far
    last: float = 0.0
    running: bool = False
    folds: int = 0  # slices done or skipped (for benchmarks and tests)

    def due(self) -> bool:
        if self.running or time.monotonic() - self.last < self.every:
            return False
        self.running = True
        return True

    async def run(self) -> None:
        """Fold one slice; a failure is logged and tried again later (the deltas stay, and
        readers fold their series themselves meanwhile)."""
        try:
            if self.cursor == 0:
                series = int(await self.pool.fetchval(_PENDING_SERIES, 0))
                self.per_slice = max(self.least, -(-series // self.rounds))
                self.slices = 0
            elif self.slices % (check := max(1, self.rounds // 4)) == 0:  # 4 times a round
                left = int(await self.pool.fetchval(_PENDING_SERIES, self.cursor))
                ticks = max(check, self.rounds - self.slices)  # left in the round, or a quarter
                self.per_slice = max(self.per_slice, -(-left // ticks))
            done = await fold_slice(self.pool, self.cursor, self.per_slice)
            self.slices += 1
            if done is not None:
                self.advance(done)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("folding metric rollups failed, trying again later: %s", exc)
        finally:
            self.folds += 1
            self.last = time.monotonic()
            self.running = False

    def advance(self, done: Folded) -> None:
        """After a slice: where the next one starts, and its size in a backlog."""
        asked = self.per_slice
        if done.deltas > FOLD_ROWS:  # a backlog: smaller slices, about FOLD_ROWS deltas each
            self.per_slice = max(1, done.series * FOLD_ROWS // done.deltas)
        self.cursor = done.last if done.series >= asked else 0  # fewer: past the last series
