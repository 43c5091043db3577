"""The telemetry gateway's per-batch arithmetic, vectorised with numpy.

What ``domain.telemetry.rollup`` says point by point (the specification, and the oracle of the
tests), done on arrays: the gateway's Python time per point must stay well below PostgreSQL's
COPY time, or it, not the database, would bound ingest. Also the points' binary COPY payload
(PostgreSQL's PGCOPY format): one ``metric_blocks`` row per series and ``BLOCK_STEPS``-step
bucket, its points as arrays, each column's elements made by one ``tobytes`` call.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from domain.telemetry import STORED_TIERS, TIER_FACTOR, TIERS

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_TRAILER = struct.pack("!h", -1)
BLOCK_STEPS = TIER_FACTOR**4  # steps of a raw block's bucket (metric_blocks, migration 0007)
BLOCK_COLUMNS = ["series_id", "bucket", "steps", "walls", "vals", "offsets"]
_INT8, _FLOAT8 = 20, 701  # PostgreSQL type oids of the array elements
_BLOCK_HEAD = np.dtype(  # a block row's first 26 bytes: 6 fields; series_id, bucket (int8)
    [("fields", ">i2"), ("series_size", ">i4"), ("series_id", ">i8"), ("bucket_size", ">i4"),
     ("bucket", ">i8")]
)  # fmt: skip
_ARRAY = struct.Struct("!iiiiii")  # byte length; 1 dimension, no NULL, element oid, n, from 1
_ELEMENT = {dt: np.dtype([("length", ">i4"), ("value", dt)]) for dt in (">i8", ">f8")}
# metric_rollups' columns, and a binary COPY row of them: field count, then (length, value) each
ROLLUP_TYPES = {
    "series_id": ">i8", "width": ">i4", "bucket": ">i8", "first_step": ">i8", "last_step": ">i8",
    "minimum": ">f8", "maximum": ">f8", "total": ">f8", "count": ">i8", "last": ">f8",
    "min_wall": ">f8", "max_wall": ">f8",
}  # fmt: skip
ROLLUP_COLUMNS = list(ROLLUP_TYPES)
_ROLLUP_ROW = np.dtype(
    [("fields", ">i2")]
    + [f for name, t in ROLLUP_TYPES.items() for f in ((name + "_size", ">i4"), (name, t))]
)


@dataclass(slots=True)
class Rows:
    """A batch's points, sorted by (series, step), record order kept within a step."""

    series: np.ndarray
    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray
    offset: np.ndarray

    @classmethod
    def of(
        cls,
        series: Sequence[int] | np.ndarray,
        step: Sequence[int] | np.ndarray,
        wall: Sequence[float] | np.ndarray,
        value: Sequence[float] | np.ndarray,
        offset: Sequence[int] | np.ndarray,
    ) -> Rows:
        s = np.asarray(series, dtype=np.int64)
        st = np.asarray(step, dtype=np.int64)
        order = np.lexsort((st, s))  # stable: equal (series, step) keep their record order
        return cls(
            s[order],
            st[order],
            np.asarray(wall, dtype=np.float64)[order],
            np.asarray(value, dtype=np.float64)[order],
            np.asarray(offset, dtype=np.int64)[order],
        )

    def __len__(self) -> int:
        return len(self.step)

    def copy_payload(self) -> bytes:
        """The ``metric_blocks`` rows of these points (columns ``BLOCK_COLUMNS``), binary."""
        bucket = self.step // BLOCK_STEPS
        starts, ends = _groups(self.series, bucket)
        columns = []
        for values, dtype, oid in (
            (self.step, ">i8", _INT8),
            (self.wall, ">f8", _FLOAT8),
            (self.value, ">f8", _FLOAT8),
            (self.offset, ">i8", _INT8),
        ):
            elements = np.empty(len(values), dtype=_ELEMENT[dtype])
            elements["length"] = 8
            elements["value"] = values
            columns.append((elements.tobytes(), oid))
        step, wall, value, offset = (c for c, _ in columns)
        heads = np.empty(len(starts), dtype=_BLOCK_HEAD)  # each block's 26 bytes, in one go
        heads["fields"], heads["series_size"], heads["bucket_size"] = 6, 8, 8
        heads["series_id"], heads["bucket"] = self.series[starts], bucket[starts]
        head = heads.tobytes()
        arrays: dict[int, tuple[bytes, bytes]] = {}  # per length: the int8 and float8 headers
        parts = [_HEADER]
        for k, (s, e) in enumerate(zip((12 * starts).tolist(), (12 * ends).tolist(), strict=True)):
            n = (e - s) // 12
            h = arrays.get(n)
            if h is None:
                h = arrays[n] = (
                    _ARRAY.pack(20 + 12 * n, 1, 0, _INT8, n, 1),
                    _ARRAY.pack(20 + 12 * n, 1, 0, _FLOAT8, n, 1),
                )
            i8, f8 = h
            parts += (head[26 * k : 26 * k + 26], i8, step[s:e], f8, wall[s:e], f8, value[s:e],
                      i8, offset[s:e])  # fmt: skip
        parts.append(_TRAILER)
        return b"".join(parts)

    def latest(self) -> list[list[Any]]:
        """Per series: id, first step, last step, last value, last wall time, points."""
        starts, ends = _groups(self.series)
        return [
            self.series[starts].tolist(),
            self.step[starts].tolist(),
            self.step[ends - 1].tolist(),
            self.value[ends - 1].tolist(),
            self.wall[ends - 1].tolist(),
            (ends - starts).tolist(),
        ]

    def rollups(self) -> list[list[Any]]:
        """The 12 columns of ``metric_rollups`` rows for every tier, as lists (None: no finite
        value)."""
        columns = self._rollup_columns()
        out: list[list[Any]] = [c.tolist() for c in columns]
        out[5], out[6] = _none_for_nan(columns[5]), _none_for_nan(columns[6])
        return out

    def rollup_payload(self, tiers: Sequence[int] = STORED_TIERS) -> bytes:
        """The same rows as a binary COPY payload (``ROLLUP_COLUMNS``; NaN for a minimum or
        maximum of no finite value), built without a Python object per value; only the
        ``tiers`` given (the ingest's deltas: the finest stored tier, ``metric_rollups.py``)."""
        columns = self._rollup_columns(tiers)
        rows = np.empty(len(columns[0]), dtype=_ROLLUP_ROW)
        rows["fields"] = len(ROLLUP_COLUMNS)
        for name, column in zip(ROLLUP_COLUMNS, columns, strict=True):
            rows[name + "_size"] = rows.dtype[name].itemsize
            rows[name] = column
        return _HEADER + rows.tobytes() + _TRAILER

    def _rollup_columns(self, tiers: Sequence[int] = STORED_TIERS) -> list[np.ndarray]:
        if not len(self):
            return [np.empty(0, np.dtype(t)) for t in ROLLUP_TYPES.values()]
        finite = np.isfinite(self.value)
        level = _Level(
            series=self.series,
            first=self.step,
            last=self.step,
            minimum=np.where(finite, self.value, np.nan),
            maximum=np.where(finite, self.value, np.nan),
            total=np.where(finite, self.value, 0.0),
            count=finite.astype(np.int64),
            last_value=self.value,
            min_wall=self.wall,
            max_wall=self.wall,
        )
        parts: list[list[np.ndarray]] = []
        for width in TIERS[: TIERS.index(max(tiers)) + 1]:
            level = level.coarser(width)
            if width in tiers:
                parts.append(level.columns(width))
        return [np.concatenate(c) for c in zip(*parts, strict=True)]


def _groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of each run of equal keys in sorted arrays."""
    n = len(keys[0])
    change = np.zeros(n - 1, dtype=bool) if n else np.zeros(0, dtype=bool)
    for k in keys:
        change |= k[1:] != k[:-1]
    starts = np.concatenate(([0], np.flatnonzero(change) + 1)) if n else np.zeros(0, np.int64)
    ends = np.concatenate((starts[1:], [n])) if n else np.zeros(0, np.int64)
    return starts.astype(np.int64), ends.astype(np.int64)


@dataclass(slots=True)
class _Level:
    series: np.ndarray
    first: np.ndarray
    last: np.ndarray
    minimum: np.ndarray  # NaN: no finite value
    maximum: np.ndarray
    total: np.ndarray
    count: np.ndarray
    last_value: np.ndarray
    min_wall: np.ndarray
    max_wall: np.ndarray
    bucket: np.ndarray | None = None

    def coarser(self, width: int) -> _Level:
        bucket = self.first // width
        starts, ends = _groups(self.series, bucket)
        if not len(starts):
            return self
        return _Level(
            series=self.series[starts],
            first=self.first[starts],
            last=self.last[ends - 1],
            minimum=np.fmin.reduceat(self.minimum, starts),
            maximum=np.fmax.reduceat(self.maximum, starts),
            total=np.add.reduceat(self.total, starts),
            count=np.add.reduceat(self.count, starts),
            last_value=self.last_value[ends - 1],
            min_wall=np.minimum.reduceat(self.min_wall, starts),
            max_wall=np.maximum.reduceat(self.max_wall, starts),
            bucket=bucket[starts],
        )

    def columns(self, width: int) -> list[np.ndarray]:
        assert self.bucket is not None
        n = len(self.series)
        return [
            self.series,
            np.full(n, width, dtype=np.int64),
            self.bucket,
            self.first,
            self.last,
            self.minimum,
            self.maximum,
            self.total,
            self.count,
            self.last_value,
            self.min_wall,
            self.max_wall,
        ]


def _none_for_nan(a: np.ndarray) -> list[float | None]:
    return [None if v != v else v for v in a.tolist()]
