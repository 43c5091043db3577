"""The gateway's vectorised rollups agree with the domain's point-by-point specification."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.postgres.ingest_arrays import ROLLUP_TYPES
from adapters.postgres.ingest_arrays import Rows as Points
from domain.telemetry import STORED_TIERS, rollup

pytestmark = pytest.mark.unit

value = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
Point = tuple[int, int, float, float]  # series, step, wall, value
point = st.tuples(st.integers(1, 3), st.integers(0, 5000), st.floats(0, 1e9), value)


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)


@given(st.lists(point, min_size=1, max_size=300))
@settings(max_examples=200, deadline=None)
def test_vectorised_rollups_equal_the_specification(points: list[Point]) -> None:
    offsets = list(range(len(points)))  # record order: the later record wins a step's tie
    series, steps, walls, values = (list(c) for c in zip(*points, strict=True))
    arrays = Points.of(series, steps, walls, values, offsets)
    columns = arrays.rollups()
    got = {(row[0], row[1], row[2]): row for row in zip(*columns, strict=True)}
    expected = rollup(points)
    want = {
        (series, width, bucket): b
        for width, buckets in expected.items()
        if width in STORED_TIERS
        for (series, bucket), b in buckets.items()
    }
    assert set(got) == set(want)
    for key, b in want.items():
        _, _, _, first, last, lo, hi, total, count, last_value, min_wall, max_wall = got[key]
        assert (first, last, count) == (b.first_step, b.last_step, b.count)
        assert same(lo, b.minimum) and same(hi, b.maximum) and same(total, b.total)
        assert same(last_value, b.last)
        assert (min_wall, max_wall) == (b.min_wall, b.max_wall)


@given(st.lists(point, min_size=0, max_size=100))
@settings(max_examples=50, deadline=None)
def test_the_rollups_copy_payload_holds_the_same_rows(points: list[Point]) -> None:
    columns: list[list[Any]] = [list(c) for c in zip(*points, strict=True)] or [[], [], [], []]
    series, steps, walls, values = columns
    arrays = Points.of(series, steps, walls, values, list(range(len(points))))
    payload = arrays.rollup_payload()
    assert payload.startswith(b"PGCOPY\n\xff\r\n\x00") and payload.endswith(b"\xff\xff")
    codes = [{">i8": "q", ">i4": "i", ">f8": "d"}[t] for t in ROLLUP_TYPES.values()]
    row = struct.Struct("!h" + "".join("i" + c for c in codes))
    body = payload[19:-2]
    assert len(body) % row.size == 0
    got = []
    for fields, *rest in row.iter_unpack(body):
        assert fields == 12 and rest[0::2] == [struct.calcsize(c) for c in codes]
        got.append([None if v != v and k in (5, 6) else v for k, v in enumerate(rest[1::2])])
    want = [list(r) for r in zip(*arrays.rollups(), strict=True)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        pairs = zip(g, w, strict=True)
        assert all(same(a, b) if isinstance(b, float) else a == b for a, b in pairs)


def test_latest_values_per_series() -> None:
    p = Points.of(
        [2, 1, 1, 2], [5, 9, 3, 5], [1.0, 2.0, 3.0, 4.0], [0.5, 0.9, 0.3, 0.7], [0, 1, 2, 3]
    )
    ids, first, last, values, walls, counts = p.latest()
    assert ids == [1, 2] and first == [3, 5] and last == [9, 5]
    assert values == [0.9, 0.7]  # series 2: two points at step 5, the later record wins
    assert walls == [2.0, 4.0] and counts == [2, 2]


def blocks(payload: bytes) -> list[tuple[int, int, list[list[float]]]]:
    """Read a PGCOPY payload of metric_blocks rows: (series, bucket, its four arrays)."""
    assert payload.startswith(b"PGCOPY\n\xff\r\n\x00") and payload.endswith(b"\xff\xff")
    out, i = [], 19
    while payload[i : i + 2] != b"\xff\xff":
        fields, _, series, _, bucket = struct.unpack_from("!hiqiq", payload, i)
        assert fields == 6
        i += 26
        arrays = []
        for _ in range(4):
            size, ndim, flags, oid, n, lower = struct.unpack_from("!iiiiii", payload, i)
            assert (ndim, flags, lower, size) == (1, 0, 1, 20 + 12 * n)
            kind = ">q" if oid == 20 else ">d"
            arrays.append([struct.unpack_from(kind, payload, i + 24 + 12 * k + 4)[0]
                           for k in range(n)])  # fmt: skip
            i += 4 + size
        out.append((series, bucket, arrays))
    assert i + 2 == len(payload)
    return out


def test_the_copy_payload_is_pgcopy_binary_blocks_per_series_and_bucket() -> None:
    p = Points.of([1, 1, 1, 2], [7, 4095, 4096, 3], [1.5, 2.5, 3.5, 4.5], [0.5, 0.25, 1.0, 2.0],
                  [40, 80, 120, 10])  # fmt: skip
    assert blocks(p.copy_payload()) == [
        (1, 0, [[7, 4095], [1.5, 2.5], [0.5, 0.25], [40, 80]]),
        (1, 1, [[4096], [3.5], [1.0], [120]]),
        (2, 0, [[3], [4.5], [2.0], [10]]),
    ]
