"""Scalars as columns: how parsers hand them to the spool, the spool to the shipper, and the
shipper to the gateway, without a Python object per scalar.

``Points`` holds, per scalar, the byte offset of its record (the deduplication key), an index
into ``tags``, the step, the wall time and the value, in record order (offsets non-decreasing;
a record's scalars in the order it lists them). It packs into one blob (the spool's payload)
and into the little-endian byte columns of ``proto/telemetry.proto``.

``Parsed`` and ``SourceParser`` are the parsers' contract (``domain.telemetry`` says what a
record and a scalar are; ``Points.records`` gives them back, for tests and tools).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import numpy as np

from domain.errors import InvalidInput
from domain.telemetry import MAX_STEP, Record, Scalar, SourceKind

# little-endian on the wire and in the spool, whatever the host
OFFSET, TAG, STEP, WALL, VALUE = (np.dtype(t) for t in ("<i8", "<u4", "<i8", "<f8", "<f8"))
COLUMNS = (("offset", OFFSET), ("tag", TAG), ("step", STEP), ("wall", WALL), ("value", VALUE))
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(tuple[list[str], bytes, bytes, bytes, bytes, bytes]).decode


class BadColumns(ValueError):
    """Byte columns that do not make points (lengths, tag indices)."""


@dataclass(slots=True)
class Points:
    tags: list[str]
    offset: np.ndarray
    tag: np.ndarray
    step: np.ndarray
    wall: np.ndarray
    value: np.ndarray

    @classmethod
    def empty(cls) -> Points:
        return cls([], *(np.empty(0, dtype) for _, dtype in COLUMNS))

    @classmethod
    def of(
        cls,
        tags: list[str],
        offset: Sequence[int] | np.ndarray,
        tag: Sequence[int] | np.ndarray,
        step: Sequence[int] | np.ndarray,
        wall: Sequence[float] | np.ndarray,
        value: Sequence[float] | np.ndarray,
    ) -> Points:
        columns = (offset, tag, step, wall, value)
        arrays = [np.asarray(c, dtype) for c, (_, dtype) in zip(columns, COLUMNS, strict=True)]
        return cls(list(tags), *arrays)

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> Points:
        index: dict[str, int] = {}
        rows = [
            (r.offset, index.setdefault(s.tag, len(index)), s.step, s.wall_time, s.value)
            for r in records
            for s in r.scalars
        ]
        if not rows:
            return cls.empty()
        return cls.of(list(index), *zip(*rows, strict=True))

    @classmethod
    def from_columns(
        cls, tags: Sequence[str], offset: bytes, tag: bytes, step: bytes, wall: bytes, value: bytes
    ) -> Points:
        """Points from little-endian byte columns (the wire, the spool); ``BadColumns`` when
        their lengths differ or a tag index is outside ``tags``."""
        size = len(offset)  # 8 bytes a point; the tag column 4; the others 8 (one check each:
        # this runs for every batch a gateway receives)
        if size % 8 or len(tag) * 2 != size or not len(step) == len(wall) == len(value) == size:
            raise BadColumns("the columns hold different numbers of points")
        points = cls(
            list(tags), np.frombuffer(offset, OFFSET), np.frombuffer(tag, TAG),
            np.frombuffer(step, STEP), np.frombuffer(wall, WALL), np.frombuffer(value, VALUE),
        )  # fmt: skip
        if size and int(points.tag.max()) >= len(points.tags):
            raise BadColumns("a tag index is outside the tag names")
        return points

    @classmethod
    def concat(cls, parts: Sequence[Points]) -> Points:
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        index: dict[str, int] = {}
        tags = []
        for p in parts:
            remap = np.array([index.setdefault(t, len(index)) for t in p.tags], dtype=TAG)
            tags.append(remap[p.tag])
        return cls(
            list(index),
            np.concatenate([p.offset for p in parts]),
            np.concatenate(tags),
            np.concatenate([p.step for p in parts]),
            np.concatenate([p.wall for p in parts]),
            np.concatenate([p.value for p in parts]),
        )

    def __len__(self) -> int:
        return len(self.step)

    def check(self, source: str) -> None:
        """Refuse points a gateway must not store: offsets going backwards, a negative step or
        offset (``InvalidInput``, naming the source)."""
        offset = self.offset
        if len(offset) < 1:
            return
        if len(offset) > 1 and bool((offset[1:] < offset[:-1]).any()):
            raise InvalidInput(
                f"source {source!r}: record offsets go backwards",
                fix="send each source's records in file order",
            )
        if offset[0] < 0 or self.step.min() < 0:  # offsets do not go back: the first is least
            raise InvalidInput(
                f"source {source!r}: a step or offset out of range",
                fix=f"steps and offsets start at 0; steps end at {MAX_STEP}",
            )

    def take(self, keep: np.ndarray | slice) -> Points:
        """The points ``keep`` selects (a boolean mask or a slice), same tag names."""
        return Points(
            self.tags, self.offset[keep], self.tag[keep], self.step[keep], self.wall[keep],
            self.value[keep],
        )  # fmt: skip

    def compact(self) -> Points:
        """The same points, their tag names cut to the ones they use."""
        used = np.unique(self.tag)
        if len(used) == len(self.tags):
            return self
        remap = np.zeros(len(self.tags), dtype=TAG)
        remap[used] = np.arange(len(used), dtype=TAG)
        return Points([self.tags[i] for i in used.tolist()], self.offset, remap[self.tag],
                      self.step, self.wall, self.value)  # fmt: skip

    def records(self) -> list[Record]:
        out: list[Record] = []
        rows = zip(self.offset.tolist(), self.tag.tolist(), self.step.tolist(),
                   self.wall.tolist(), self.value.tolist(), strict=True)  # fmt: skip
        for offset, tag, step, wall, value in rows:
            scalar = Scalar(self.tags[tag], step, wall, value)
            if out and out[-1].offset == offset:
                out[-1] = Record(offset, (*out[-1].scalars, scalar))
            else:
                out.append(Record(offset, (scalar,)))
        return out

    def record_count(self) -> int:
        return int(np.count_nonzero(np.diff(self.offset))) + 1 if len(self) else 0

    def split(self, max_points: int) -> list[Points]:
        """Pieces of at most ``max_points`` points (more only where one record has more), each
        with the tag names it uses only (a spool row, then a batch, carries no other), never
        splitting a record: a gateway that stored part of a record would take the rest
        for a resend."""
        n = len(self)
        if n <= max_points:
            return [self] if n else []
        pieces, start = [], 0
        while start < n:
            end = min(n, start + max_points)
            if end < n:  # back to the start of the record that ``end`` falls in
                cut = int(np.searchsorted(self.offset, self.offset[end], side="left"))
                if cut > start:
                    end = cut
                else:  # one record of more than max_points: keep it whole
                    end = int(np.searchsorted(self.offset, self.offset[start], side="right"))
            pieces.append(self.take(slice(start, end)).compact())  # only its own tag names
            start = end
        return pieces

    def pack(self) -> bytes:
        return _pack((self.tags, *self.column_bytes()))

    @classmethod
    def unpack(cls, blob: bytes) -> Points:
        tags, *columns = _unpack(blob)
        return cls.from_columns(tags, *columns)

    def column_bytes(self) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """offset, tag, step, wall, value as little-endian bytes."""
        o, t, s, w, v = (np.ascontiguousarray(c, d).tobytes() for c, (_, d) in
                         zip(self._columns(), COLUMNS, strict=True))  # fmt: skip
        return o, t, s, w, v

    def _columns(self) -> tuple[np.ndarray, ...]:
        return self.offset, self.tag, self.step, self.wall, self.value


@dataclass(slots=True)
class Parsed:
    """What a parser made of a chunk of a source.

    ``consumed``: bytes from the chunk's start that need not be read again (complete records
    and skipped corrupt bytes); a truncated last record is not consumed, so it is read again
    once the writer has finished it. ``corrupt``: records counted and skipped.
    """

    points: Points = field(default_factory=Points.empty)
    consumed: int = 0
    corrupt: int = 0

    @property
    def records(self) -> list[Record]:
        return self.points.records()


class SourceParser(Protocol):
    """Reads one source incrementally. Stateful (TensorBoard names a tag's plugin only once)."""

    kind: SourceKind

    def feed(self, data: bytes, offset: int, *, final: bool = False) -> Parsed:
        """Parse ``data``, read from the source at ``offset``.

        ``final``: the source will not grow (it was replaced or the member ended), so a
        truncated tail is counted as corrupt and consumed instead of waited for.
        """
        ...
