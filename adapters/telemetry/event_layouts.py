"""Decoding many TensorBoard events at once, by layout.

A writer logs the same tags step after step, so most events of a file are byte for byte alike
except for the wall time, the step and the values: the same *layout*. The parser learns a
layout from one event of the common shape (wall time, step, then a summary of values that are a
tag and a ``simple_value``, the shape of tensorboardX and torch's SummaryWriter), then finds
every other event of the chunk with that length whose other bytes all equal the layout's, and
reads their wall times, steps and values as columns with numpy. An event that matches no
layout is decoded on its own (``events.TfEventsParser``): the results are the same, only faster.

A layout is exact: every byte outside the wall time, the step and the values must be equal
(tags, lengths and field keys included), and the step's varint must keep its length, so a
matched event decodes to what the one-by-one decoder would give.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Layout:
    body: np.ndarray  # the event the layout was learned from (uint8)
    fixed: np.ndarray  # indices of the bytes every matching event must share
    wall_at: int  # where the 8-byte wall time starts, -1 when absent (0.0)
    step_at: int
    step_len: int  # bytes of the step's varint, 0 when absent (step 0)
    tags: tuple[str, ...]  # per value, in the event's order
    value_at: tuple[int, ...]  # where each value's 4-byte float starts

    @property
    def length(self) -> int:
        return len(self.body)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    """(value, index after it), at most 9 bytes (a step of 10 is negative: not this shape)."""
    result = shift = 0
    for k in range(9):
        x = b[i + k]
        result |= (x & 127) << shift
        if x < 128:
            return result, i + k + 1
        shift += 7
    raise ValueError("not a short varint")


def learn(b: bytes) -> Layout | None:
    """The layout of event ``b`` if it has the common simple-value shape, else None."""
    try:
        return _learn(b)
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _learn(b: bytes) -> Layout | None:
    n = len(b)
    i, wall_at = 0, -1
    if b[0] == 9:  # wall_time, double
        wall_at, i = 1, 9
    step_at, step_len = i, 0
    if b[i] == 16:  # step, varint
        _, end = _varint(b, i + 1)
        step_at, step_len, i = i + 1, end - i - 1, end
    if b[i] != 42:  # summary
        return None
    length, i = _varint(b, i + 1)
    if i + length != n or length == 0:
        return None
    tags: list[str] = []
    value_at: list[int] = []
    while i < n:  # Summary.value: 0x0a <len> 0x0a <tag len> <tag> 0x15 <float32>
        if b[i] != 10:
            return None
        vlen, i = _varint(b, i + 1)
        if b[i] != 10 or b[i + 1] >= 128:
            return None
        tl = b[i + 1]
        if tl == 0 or vlen != tl + 7 or b[i + 2 + tl] != 21:
            return None
        tags.append(b[i + 2 : i + 2 + tl].decode())
        value_at.append(i + 3 + tl)
        i += vlen
    if i != n:
        return None
    variable = np.zeros(n, dtype=bool)
    if wall_at >= 0:
        variable[wall_at : wall_at + 8] = True
    variable[step_at : step_at + step_len] = True
    for at in value_at:
        variable[at : at + 4] = True
    body = np.frombuffer(b, dtype=np.uint8)
    return Layout(body, np.flatnonzero(~variable), wall_at, step_at, step_len, tuple(tags),
                  tuple(value_at))  # fmt: skip


@dataclass(slots=True)
class Decoded:
    """Events decoded by one layout: which ones (indices into the chunk's events), and per
    event its step and wall time, per value a column."""

    events: np.ndarray
    step: np.ndarray
    wall: np.ndarray
    values: list[np.ndarray]


def match(layout: Layout, buf: np.ndarray, starts: np.ndarray) -> Decoded:
    """Decode the events starting at ``starts`` in ``buf`` (all of the layout's length) that
    have the layout; ``events`` says which (indices into ``starts``)."""
    rows = buf[starts[:, None] + np.arange(layout.length)]
    ok = (rows[:, layout.fixed] == layout.body[layout.fixed]).all(axis=1)
    at, k = layout.step_at, layout.step_len
    if k:
        ok &= rows[:, at + k - 1] < 128
        if k > 1:
            ok &= (rows[:, at : at + k - 1] >= 128).all(axis=1)
    events = np.flatnonzero(ok)
    rows = rows[events]
    step = np.zeros(len(events), dtype=np.int64)
    for j in range(k):
        step |= (rows[:, at + j] & 127).astype(np.int64) << (7 * j)
    if layout.wall_at >= 0:
        w = layout.wall_at
        wall = np.ascontiguousarray(rows[:, w : w + 8]).view("<f8").ravel()
    else:
        wall = np.zeros(len(events))
    values = [
        np.ascontiguousarray(rows[:, v : v + 4]).view("<f4").ravel().astype(np.float64)
        for v in layout.value_at
    ]
    return Decoded(events, step, wall, values)
