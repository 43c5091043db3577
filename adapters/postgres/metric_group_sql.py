"""The group commit's statements (metric_groups.py), and the finish's parameters as array
literals (one text each, ``arrays.py``: asyncpg encodes a list parameter element by element)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from adapters.postgres.arrays import float_array, int_array, text_array, time_array
from adapters.postgres.ingest_arrays import BLOCK_COLUMNS, ROLLUP_COLUMNS

# what asyncpg's copy_to_table(table, columns=..., format="binary") sends; the deltas' COPY ends
# the group's transaction in the same message (metric_groups.py, ``_end``)
COPY_BLOCKS = f"COPY metric_blocks ({', '.join(BLOCK_COLUMNS)}) FROM STDIN (FORMAT binary)"
COPY_DELTAS_COMMIT = (
    f"COPY metric_rollup_deltas ({', '.join(ROLLUP_COLUMNS)}) FROM STDIN (FORMAT binary); COMMIT"
)

WATERMARKS = """
INSERT INTO telemetry_sources AS t (member_id, source, kind, watermark, updated_at)
SELECT u.member_id, u.source, u.kind, -1, now()
FROM unnest($1::text[], $2::text[], $3::text[]) AS u(member_id, source, kind)
ORDER BY u.member_id, u.source
ON CONFLICT (member_id, source) DO UPDATE SET kind = t.kind
RETURNING t.member_id, t.source, t.watermark
"""  # an upsert that changes nothing still locks the rows it returns, in the rows' order

# The same rows locked without writing them, when every one exists (a source's later batches):
# the upsert writes a new version of each row it locks (its DO UPDATE), then the finish
# another; locked in the same (member, source) order (the lock is taken after the sort). When a
# row is missing, the rows this statement locked are held while the upsert takes the rest: a
# third group that made a row between two groups' reads can then deadlock two of them;
# PostgreSQL aborts one, and ``_flush`` stores that group's batches one by one (nothing acked
# before its commit, a resend cut by the watermark).
LOCK_MARKS = """
SELECT t.member_id, t.source, t.watermark FROM telemetry_sources t
JOIN unnest($1::text[], $2::text[]) AS u(member_id, source)
    ON t.member_id = u.member_id AND t.source = u.source
ORDER BY t.member_id, t.source
FOR NO KEY UPDATE OF t
"""

# The rest of a group but its deltas in one round trip: the series' latest values, the raised
# watermarks ($7: now) and the members' counters (data-modifying CTEs run to completion, read or
# not). Every array is one text parameter, an array literal (``finish_params``). A watermark is
# raised only where it still holds what the cut assumed (``was``, $18): the statement returns
# how many were raised, and fewer than asked means the cut was wrong (remembered watermarks
# another gateway moved meanwhile): the caller rolls the group back.
FINISH = """
WITH series AS (
    UPDATE metric_series s SET
        first_step = LEAST(s.first_step, u.first_step),
        last_value = CASE WHEN u.last_step >= s.last_step THEN u.last_value ELSE s.last_value END,
        last_wall = CASE WHEN u.last_step >= s.last_step THEN u.last_wall ELSE s.last_wall END,
        last_step = GREATEST(s.last_step, u.last_step),
        count = s.count + u.n
    FROM unnest($1::text::bigint[], $2::text::bigint[], $3::text::bigint[],
        $4::text::float8[], $5::text::float8[], $6::text::bigint[])
        AS u(id, first_step, last_step, last_value, last_wall, n)
    WHERE s.id = u.id
), marks AS (
    UPDATE telemetry_sources t SET watermark = u.mark, updated_at = $7
    FROM unnest($8::text::text[], $9::text::text[], $10::text::bigint[], $18::text::bigint[])
        AS u(member_id, source, mark, was)
    WHERE t.member_id = u.member_id AND t.source = u.source AND t.watermark = u.was
    RETURNING 1
), members AS (
    INSERT INTO telemetry_members AS t (member_id, points, duplicates, corrupt_records,
        dropped_records, dropped_bytes, last_batch_at)
    SELECT * FROM unnest($11::text::text[], $12::text::bigint[], $13::text::bigint[],
        $14::text::bigint[], $15::text::bigint[], $16::text::bigint[],
        $17::text::timestamptz[]) ORDER BY 1
    ON CONFLICT (member_id) DO UPDATE SET
        points = t.points + EXCLUDED.points,
        duplicates = t.duplicates + EXCLUDED.duplicates,
        corrupt_records = GREATEST(t.corrupt_records, EXCLUDED.corrupt_records),
        dropped_records = GREATEST(t.dropped_records, EXCLUDED.dropped_records),
        dropped_bytes = GREATEST(t.dropped_bytes, EXCLUDED.dropped_bytes),
        last_batch_at = GREATEST(t.last_batch_at, EXCLUDED.last_batch_at)
)
SELECT count(*) FROM marks
"""

NEW_SERIES = """
INSERT INTO metric_series (job_id, attempt_id, member_id, source, tag, first_step, last_step,
    count, last_value, last_wall)
SELECT u.job_id, u.attempt_id, u.member_id, u.source, u.tag, $6, -1, 0, 'NaN', 0
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
    AS u(job_id, attempt_id, member_id, source, tag)
ORDER BY u.member_id, u.source, u.tag
ON CONFLICT (member_id, source, tag) DO NOTHING
"""

SERIES_IDS = """
SELECT s.id, s.member_id, s.source, s.tag FROM metric_series s
JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(member_id, source, tag)
    ON s.member_id = u.member_id AND s.source = u.source AND s.tag = u.tag
"""


def finish_params(
    latest: Sequence[Sequence[Any]],
    now: datetime,
    raised: Sequence[tuple[tuple[str, str], int, int]],
    counters: Sequence[Sequence[Any]],
) -> list[Any]:
    """``FINISH``'s 18 parameters: the series' latest values (id, first step, last step, value,
    wall, points), now, the raised watermarks ((member, source), mark, the watermark the cut
    assumed) and the members' counters (member, points, duplicates, corrupt, dropped records,
    dropped bytes, last batch at)."""
    ids, first, last, value, wall, n = latest
    members, points, duplicates, corrupt, dropped, dropped_bytes, at = counters
    return [
        int_array(ids), int_array(first), int_array(last), float_array(value),
        float_array(wall), int_array(n), now,
        text_array([m for (m, _), _, _ in raised]), text_array([s for (_, s), _, _ in raised]),
        int_array([mark for _, mark, _ in raised]),
        text_array(members), int_array(points), int_array(duplicates), int_array(corrupt),
        int_array(dropped), int_array(dropped_bytes), time_array(at),
        int_array([was for _, _, was in raised]),
    ]  # fmt: skip
