"""Scalars as columns: splitting never cuts a record, concatenating merges tag names, packing
and byte columns keep every bit, and byte columns that do not make points are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telemetry.columns import BadColumns, Points
from domain.errors import InvalidInput
from domain.telemetry import Record, Scalar

pytestmark = pytest.mark.unit


def records(sizes: list[int], tags: tuple[str, ...] = ("a", "b", "c")) -> list[Record]:
    """One record per size, at offsets 0, 10, 20, …, with that many scalars."""
    return [
        Record(10 * i, tuple(Scalar(tags[k % len(tags)], i, 1.5 * i, i + k / 8) for k in range(n)))
        for i, n in enumerate(sizes)
    ]


@given(st.lists(st.integers(1, 9), max_size=40), st.integers(1, 12))
@settings(max_examples=200, deadline=None)
def test_split_keeps_records_whole_and_in_order(sizes: list[int], most: int) -> None:
    points = Points.from_records(records(sizes))
    pieces = points.split(most)
    assert Points.concat(pieces).records() == points.records()
    for piece in pieces:
        assert len(piece) <= most or piece.record_count() == 1  # only a lone big record is over
    seen = [r.offset for piece in pieces for r in piece.records()]
    assert len(seen) == len(set(seen)) == len(sizes)  # no record in two pieces


def test_concat_merges_tag_names_and_compact_drops_unused_ones() -> None:
    a = Points.from_records(records([2], ("x", "y")))
    b = Points.from_records([Record(50, (Scalar("y", 9, 1.0, 2.0), Scalar("z", 9, 1.0, 3.0)))])
    both = Points.concat([a, b])
    assert both.tags == ["x", "y", "z"]
    assert [s.tag for r in both.records() for s in r.scalars] == ["x", "y", "y", "z"]
    only_z = both.take(both.tag == 2).compact()
    assert only_z.tags == ["z"] and only_z.tag.tolist() == [0]


def test_packing_and_byte_columns_keep_every_bit() -> None:
    values = [math.nan, math.inf, -math.inf, -0.0, 5e-324, 2**53 + 1.0]
    p = Points.of(["v"], range(6), [0] * 6, [0, 1, 2**62, 2**63 - 1, 4, 5], [1.5] * 6, values)
    for again in (Points.unpack(p.pack()), Points.from_columns(p.tags, *p.column_bytes())):
        assert [repr(v) for v in again.value.tolist()] == [repr(v) for v in values]
        assert again.step.tolist() == p.step.tolist() and again.offset.tolist() == list(range(6))


def test_byte_columns_that_do_not_make_points_are_refused() -> None:
    p = Points.from_records(records([2, 1]))
    offset, tag, step, wall, value = p.column_bytes()
    with pytest.raises(BadColumns, match="different numbers"):
        Points.from_columns(p.tags, offset, tag, step, wall, value[:-8])
    with pytest.raises(BadColumns, match="different numbers"):
        Points.from_columns(p.tags, offset, tag, step[:-3], wall, value)
    with pytest.raises(BadColumns, match="outside the tag names"):
        Points.from_columns(["a"], offset, tag, step, wall, value)
    # each column checked against the offsets' count: a tag too many or too few, a torn point
    for cut in (
        (offset, tag + tag[:4], step, wall, value),
        (offset, tag[:-4], step, wall, value),
        (offset[:-1], tag, step[:-1], wall[:-1], value[:-1]),
        (offset, tag, step, wall[:-8], value),
        (offset + offset[:8], tag, step, wall, value),
    ):
        with pytest.raises(BadColumns, match="different numbers"):
            Points.from_columns(p.tags, *cut)
    assert len(Points.from_columns([], b"", b"", b"", b"", b"")) == 0


def test_check_refuses_backward_offsets_and_negative_steps() -> None:
    good = Points.from_records(records([1, 1]))
    good.check("s")
    backwards = Points.of(["a"], [10, 0], [0, 0], [1, 2], [0.0, 0.0], [0.0, 0.0])
    with pytest.raises(InvalidInput, match="go backwards"):
        backwards.check("s")
    negative = Points.of(["a"], [0, 10], [0, 0], [1, -2], [0.0, 0.0], [0.0, 0.0])
    with pytest.raises(InvalidInput, match="out of range"):
        negative.check("s")
    below_zero = Points.of(["a"], [-5, 0], [0, 0], [1, 2], [0.0, 0.0], [0.0, 0.0])
    with pytest.raises(InvalidInput, match="out of range"):
        below_zero.check("s")
    Points.empty().check("s")
    Points.of(["a"], [7], [0], [0], [0.0], [math.nan]).check("s")  # one point; NaN is a value
    assert np.array_equal(good.offset, [0, 10])
