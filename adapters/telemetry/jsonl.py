"""JSONL metric files: one record per line.

Two forms: ``{"step": 10, "wall_time": 1.7e9, "metrics": {"train/loss": 0.3}}`` (what
``adapters/sdk/report.py`` writes) and flat ``{"step": 10, "train/loss": 0.3, "time": …}``
(every number other than the step and the time is a metric; the time may be ``wall_time``,
``time`` or ``timestamp``; without one, the time the line was read). Booleans, strings and
nested objects are not metrics. A line that is not a JSON object with a non-negative integer
``step`` is counted corrupt and skipped. The last line is read only once its newline is
written (the writer may be in the middle of it), or when the file is final.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
import numpy as np

from adapters.telemetry.columns import OFFSET, STEP, WALL, Parsed, Points
from domain.telemetry import MAX_STEP, SourceKind

_TIME_KEYS = ("wall_time", "time", "timestamp")
_decode = msgspec.json.Decoder().decode
_NOT_METRICS = frozenset(("step", *_TIME_KEYS))


def _object(line: bytes) -> Any:
    """The JSON value of ``line``, or None when it is not JSON."""
    try:
        return _decode(line)
    except msgspec.DecodeError:
        try:  # Python's json writes NaN and Infinity, which strict JSON (msgspec) refuses
            return json.loads(line)
        except (ValueError, RecursionError):
            return None
    except (ValueError, RecursionError):
        return None


def _number(v: Any) -> float | None:
    t = type(v)
    if t is float:
        return v  # type: ignore[no-any-return]
    if t is not int and (isinstance(v, bool) or not isinstance(v, int | float)):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer beyond float's range: not a metric
        return None


class _Line(msgspec.Struct):
    """The SDK's form, decoded and checked in one call (anything else: the general path)."""

    step: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
    wall_time: float
    metrics: dict[str, float]


_decode_line = msgspec.json.Decoder(_Line).decode


class _Columns:
    """Per line its offset, step, wall time and number of scalars; per scalar its tag and
    value (the per-line columns are repeated once at the end)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.offset: list[int] = []
        self.step: list[int] = []
        self.wall: list[float] = []
        self.count: list[int] = []
        self.tag: list[int] = []
        self.value: list[float] = []
        self._keys: tuple[str, ...] = ()  # the tags of the last SDK-form line, and their indices
        self._indices: list[int] = []

    def add_line(self, line: bytes, offset: int) -> bool:
        """Add the scalars of one line; False when the line is corrupt."""
        try:
            got = _decode_line(line)
        except msgspec.DecodeError:  # not the SDK's form (or not JSON): the general path
            return self.add(_object(line), offset)
        except RecursionError:  # nested deeper than a metric line ever is: corrupt
            return False
        metrics = got.metrics
        if "" in metrics:
            return self.add(_object(line), offset)
        keys = tuple(metrics)
        if keys != self._keys:
            index = self.index
            self._keys = keys
            self._indices = [index.setdefault(k, len(index)) for k in keys]
        wall = got.wall_time
        self._line(offset, got.step, wall if math.isfinite(wall) else time.time(), len(keys))
        self.tag += self._indices
        self.value += metrics.values()
        return True

    def add(self, obj: Any, offset: int) -> bool:
        """Add the scalars of one line's object; False when the line is corrupt."""
        if type(obj) is not dict:
            return False
        step = obj.get("step")
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            return False
        wall = None
        for key in _TIME_KEYS:
            if key in obj:
                wall = _number(obj[key])
                break
        if wall is None or not math.isfinite(wall):
            wall = time.time()
        metrics = obj.get("metrics")
        items: Iterable[tuple[Any, Any]]
        if type(metrics) is dict:
            items = metrics.items()
        else:
            items = ((k, v) for k, v in obj.items() if k not in _NOT_METRICS)
        index = self.index
        n = 0
        for tag, v in items:
            value = _number(v)
            if value is None or type(tag) is not str or not tag:
                continue
            self.tag.append(index.setdefault(tag, len(index)))
            self.value.append(value)
            n += 1
        self._line(offset, step, wall, n)
        return True

    def _line(self, offset: int, step: int, wall: float, n: int) -> None:
        self.offset.append(offset)
        self.step.append(step)
        self.wall.append(wall)
        self.count.append(n)

    def points(self) -> Points:
        count = np.asarray(self.count, dtype=np.int64)
        offset, step, wall = (
            np.repeat(np.asarray(c, dtype=d), count)
            for c, d in ((self.offset, OFFSET), (self.step, STEP), (self.wall, WALL))
        )
        return Points.of(list(self.index), offset, self.tag, step, wall, self.value)


class JsonlParser:
    kind: SourceKind = "jsonl"

    def feed(self, data: bytes, offset: int, *, final: bool = False) -> Parsed:
        end = len(data) if final else data.rfind(b"\n") + 1
        if end <= 0:
            return Parsed()
        cols, corrupt = _Columns(), 0
        pos = offset
        for text in data[:end].split(b"\n"):
            if text and not text.isspace() and not cols.add_line(text, pos):
                corrupt += 1
            pos += len(text) + 1
        return Parsed(cols.points(), end, corrupt)
