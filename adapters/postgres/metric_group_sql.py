"""A group commit's statements with their values written in (session 44): fewer round trips.

asyncpg sends a statement with parameters by the extended protocol: one statement per round
trip, and ``BEGIN`` and ``COMMIT`` a round trip each. A statement without parameters goes by the
simple protocol, which takes several statements in one message. So a group whose sources'
watermarks this gateway already knows (``GroupedAppends.marks``, what it committed last) makes
four round trips instead of six:

1. ``BEGIN`` and the lock of the group's watermark rows (``lock_marks``: the same ``SELECT … FOR
   NO KEY UPDATE`` in (member, source) order as the other path, its rows not read);
2. and 3. the points' and the deltas' COPYs, the batches cut at the known watermarks;
4. the finish (``finish_commit``: the series' latest values, the watermarks, the members'
   counters) and ``COMMIT``. The finish raises the watermarks only where they still hold what
   the cut assumed (``WHERE t.watermark = u.expected``), under the lock taken in step 1, and
   its last ``SELECT`` fails (an integer cast of ``MOVED``) when any did not, so ``COMMIT`` is
   never reached: the transaction rolls back and the group is stored by the path that reads
   the watermarks first. Nothing is acknowledged before the commit either way.

The values are PostgreSQL literals: array literals inside standard SQL string constants
(``standard_conforming_strings`` is on, PostgreSQL's default since 9.1: only ``'`` is doubled in
a constant; ``"`` and ``\\`` are escaped inside an array element). Floats are written by
``float.__repr__`` (the shortest text that reads back to the same double; ``nan``, ``inf`` and
``-inf`` are accepted by ``float8in``), integers through ``int`` (digits only), text and
timestamps by ``arrays.py`` (elements double-quoted; timestamps in ISO 8601 with their offset,
naive ones refused). Writing them
costs the gateway less than asyncpg's binary encoding of Python lists, which checks every
element against ``collections.abc.Iterable`` (benchmarks.md, session 44).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from adapters.postgres import arrays

MOVED = "telemetry watermarks moved"  # the text the finish casts to an integer to fail


def constant(text: str) -> str:
    """A standard SQL string constant."""
    if "\x00" in text:
        raise ValueError("a NUL character cannot be sent to PostgreSQL")
    return "'" + text.replace("'", "''") + "'"


def text_array(values: Iterable[str]) -> str:
    return constant(arrays.text_array(list(values))) + "::text[]"


def int_array(values: Iterable[Any]) -> str:
    return "'{" + ",".join(str(int(v)) for v in values) + "}'::bigint[]"  # int(): digits only


def float_array(values: Iterable[float]) -> str:
    return "'{" + ",".join(map(float.__repr__, values)) + "}'::float8[]"


def timestamp(at: datetime) -> str:
    return constant(arrays.time_array([at])[2:-2]) + "::timestamptz"


def timestamp_array(values: Sequence[datetime]) -> str:
    return constant(arrays.time_array(values)) + "::timestamptz[]"


def lock_marks(keys: Sequence[tuple[str, str]]) -> str:
    """``BEGIN`` and the lock of these (member, source) watermark rows, in their order."""
    return (
        "BEGIN; SELECT 1 FROM telemetry_sources t JOIN unnest("
        + text_array(k[0] for k in keys) + ", " + text_array(k[1] for k in keys)
        + ") AS u(member_id, source) ON t.member_id = u.member_id AND t.source = u.source"
        " ORDER BY t.member_id, t.source FOR NO KEY UPDATE OF t"
    )  # fmt: skip


def finish_commit(
    latest: list[list[Any]],
    now: datetime,
    marks: Sequence[tuple[tuple[str, str], int, int]],
    counters: list[list[Any]],
) -> str:
    """The group's finish and ``COMMIT``. ``latest``: per series id, first step, last step,
    last value, last wall time, points; ``marks``: per (member, source), the watermark the cut
    assumed and the new one; ``counters``: per member, points, duplicates, corrupt records,
    dropped records, dropped bytes, time of its last batch."""
    ids, first, last, value, wall, count = latest
    members, points, duplicates, corrupt, dropped, dropped_bytes, at = counters
    check = constant(MOVED)
    return f"""
WITH series AS (
    UPDATE metric_series s SET
        first_step = LEAST(s.first_step, u.first_step),
        last_value = CASE WHEN u.last_step >= s.last_step THEN u.last_value ELSE s.last_value END,
        last_wall = CASE WHEN u.last_step >= s.last_step THEN u.last_wall ELSE s.last_wall END,
        last_step = GREATEST(s.last_step, u.last_step),
        count = s.count + u.n
    FROM unnest({int_array(ids)}, {int_array(first)}, {int_array(last)},
        {float_array(value)}, {float_array(wall)}, {int_array(count)})
        AS u(id, first_step, last_step, last_value, last_wall, n)
    WHERE s.id = u.id
    RETURNING 1
), marks AS (
    UPDATE telemetry_sources t SET watermark = u.mark,
        updated_at = CASE WHEN u.mark > u.expected THEN {timestamp(now)} ELSE t.updated_at END
    FROM unnest({text_array(k[0] for k, _, _ in marks)}, {text_array(k[1] for k, _, _ in marks)},
        {int_array(e for _, e, _ in marks)}, {int_array(m for _, _, m in marks)})
        AS u(member_id, source, expected, mark)
    WHERE t.member_id = u.member_id AND t.source = u.source AND t.watermark = u.expected
    RETURNING 1
), members AS (
    INSERT INTO telemetry_members AS t (member_id, points, duplicates, corrupt_records,
        dropped_records, dropped_bytes, last_batch_at)
    SELECT * FROM unnest({text_array(members)}, {int_array(points)}, {int_array(duplicates)},
        {int_array(corrupt)}, {int_array(dropped)}, {int_array(dropped_bytes)},
        {timestamp_array(at)}) ORDER BY 1
    ON CONFLICT (member_id) DO UPDATE SET
        points = t.points + EXCLUDED.points,
        duplicates = t.duplicates + EXCLUDED.duplicates,
        corrupt_records = GREATEST(t.corrupt_records, EXCLUDED.corrupt_records),
        dropped_records = GREATEST(t.dropped_records, EXCLUDED.dropped_records),
        dropped_bytes = GREATEST(t.dropped_bytes, EXCLUDED.dropped_bytes),
        last_batch_at = GREATEST(t.last_batch_at, EXCLUDED.last_batch_at)
    RETURNING 1
)
SELECT CAST(CASE WHEN (SELECT count(*) FROM marks) = {len(marks)} THEN '1' ELSE {check} END
    AS integer);
COMMIT"""


def moved(exc: BaseException) -> bool:
    """Whether ``exc`` is the finish's refusal: a watermark was not what the cut assumed."""
    return MOVED in str(exc)
