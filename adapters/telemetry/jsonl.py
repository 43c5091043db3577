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
from typing import Any

import msgspec

from domain.telemetry import MAX_STEP, Parsed, Record, Scalar, SourceKind

_TIME_KEYS = ("wall_time", "time", "timestamp")
_decode = msgspec.json.Decoder().decode


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer beyond float's range: not a metric
        return None


def scalars_of(line: bytes) -> tuple[Scalar, ...] | None:
    """The scalars of one line, or None if the line is corrupt."""
    try:
        obj = _decode(line)
    except msgspec.DecodeError:
        try:  # Python's json writes NaN and Infinity, which strict JSON (msgspec) refuses
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return None
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return None
    wall = next((_number(obj[k]) for k in _TIME_KEYS if k in obj), None)
    if wall is None or not math.isfinite(wall):
        wall = time.time()
    metrics = obj.get("metrics")
    items: Iterable[tuple[Any, Any]]
    if isinstance(metrics, dict):
        items = metrics.items()
    else:
        items = ((k, v) for k, v in obj.items() if k != "step" and k not in _TIME_KEYS)
    out = []
    for tag, v in items:
        value = _number(v)
        if value is not None and isinstance(tag, str) and tag:
            out.append(Scalar(tag, step, wall, value))
    return tuple(out)


class JsonlParser:
    kind: SourceKind = "jsonl"

    def feed(self, data: bytes, offset: int, *, final: bool = False) -> Parsed:
        parsed = Parsed()
        pos = 0
        n = len(data)
        while pos < n:
            end = data.find(b"\n", pos)
            if end < 0:
                if not final:
                    break
                end = n
            line = data[pos:end].strip()
            if line:
                scalars = scalars_of(line)
                if scalars is None:
                    parsed.corrupt += 1
                else:
                    parsed.records.append(Record(offset + pos, scalars))
            pos = min(end + 1, n)
        parsed.consumed = pos
        return parsed
