"""Array parameters sent as PostgreSQL array literals (one text each), not as Python lists.

asyncpg encodes a list parameter element by element (type checks and a codec call per element:
about 1 µs each, 1.4 µs for a timestamp). A scheduling pass that fills an empty fleet binds some
45,000 elements in its two statements, tens of milliseconds of the pass. Sent as one text each
(``CAST(CAST(:x AS text) AS text[])`` in the SQL), the array is built here with C-speed string
joins and parsed by the server's array input (docs/scheduling.md, "Storing a pass").

The literal's rules (PostgreSQL's ``array_in``): every text element is double-quoted, so only a
backslash and a double quote need escaping (commas, braces, spaces, newlines and the word NULL
inside quotes are plain text); a SQL NULL is the bare word ``NULL``. Timestamps must carry their
offset (naive ones are refused: the server would read them in its session's time zone)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime


def _quoted(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Sequence[str | None]) -> str:
    """``text[]`` literal: ``["a", None, 'b"c']`` → ``{"a",NULL,"b\\"c"}``."""
    if not values:
        return "{}"
    if None not in values:
        joined = '","'.join(values)  # type: ignore[arg-type]  # no None, checked above
        # fast path: no element holds a backslash or a quote (every quote is a separator's)
        if "\\" not in joined and joined.count('"') == 2 * (len(values) - 1):
            return '{"' + joined + '"}'
    return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"


def int_array(values: Sequence[int | None]) -> str:
    """``int[]`` (or ``bigint[]``) literal: ``[1, None, -2]`` → ``{1,NULL,-2}``."""
    if None not in values:
        return "{" + ",".join(map(str, values)) + "}"
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def time_array(values: Sequence[datetime | None]) -> str:
    """``timestamptz[]`` literal of aware datetimes (ISO 8601 with their offset); each distinct
    value is formatted once (a pass's rows mostly share one time)."""
    seen: dict[datetime, str] = {}
    out: list[str] = []
    for v in values:
        if v is None:
            out.append("NULL")
            continue
        s = seen.get(v)
        if s is None:
            if v.tzinfo is None or v.utcoffset() is None:
                raise ValueError(f"{v!r} has no time zone: a timestamptz needs one")
            s = seen[v] = '"' + v.isoformat() + '"'
        out.append(s)
    return "{" + ",".join(out) + "}"


_ARRAY_PARAM = re.compile(r"CAST\(:(\w+) AS (text|int|bigint|timestamptz)\[\]\)")


def literal_params(sql: str) -> str:
    """The statement with every ``CAST(:x AS type[])`` taking a literal: ``CAST(CAST(:x AS text)
    AS type[])`` (so its parameter is bound as one text: pass ``text_array(...)`` etc.)."""
    return _ARRAY_PARAM.sub(r"CAST(CAST(:\1 AS text) AS \2[])", sql)


def float_array(values: Sequence[float]) -> str:
    """``float8[]`` literal, each value as Python's ``repr``: the shortest text that reads back
    to the same double; ``nan``, ``inf`` and ``-inf`` are PostgreSQL's spellings too."""
    return "{" + ",".join(map(float.__repr__, values)) + "}"
