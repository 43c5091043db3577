"""Test helpers: a ``SourceBatch`` from plain per-point lists."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.telemetry.columns import Points
from domain.telemetry import SourceBatch, SourceKind


def source_batch(
    source: str,
    kind: SourceKind,
    tags: Sequence[str],
    offsets: Sequence[int],
    steps: Sequence[int],
    walls: Sequence[float],
    values: Sequence[float],
) -> SourceBatch:
    """One tag name, offset, step, wall time and value per point."""
    index: dict[str, int] = {}
    tag = [index.setdefault(t, len(index)) for t in tags]
    return SourceBatch(source, kind, Points.of(list(index), offsets, tag, steps, walls, values))
