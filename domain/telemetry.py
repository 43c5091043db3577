"""Training metrics: what the collector reads from a member's files and how queries stay bounded.

A *source* is one file a member writes (a TensorBoard event file or a JSONL file), named by the
collector (its path below the member's metrics directory and a generation that grows when the
file is truncated or replaced). A *record* is one TFRecord or one JSONL line; its byte offset in
the source is the unit of deduplication: the telemetry gateway stores a record at most once per
(member, source, offset), so a collector may resend after any crash.

Queries never scan a series: the store keeps rollup tiers (buckets of ``TIER_FACTOR ** k``
steps with min, max, sum, count and last) maintained at ingest, and ``plan_view`` picks the
finest width whose buckets in the asked range number at most ``points``. The finest width (8)
is not stored: a view at that width reads at most ``8 × points`` raw points and aggregates
them as it reads; storing it would cost a rollup row per 8 points at ingest (measured: the
rollup writes then cost about half as much as the points' COPY), the coarser tiers cost one
row per 64 points together.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from domain.errors import InvalidInput

SourceKind = Literal["tfevents", "jsonl"]
SOURCE_KINDS: tuple[SourceKind, ...] = ("tfevents", "jsonl")

TIER_FACTOR = 8
TIERS: tuple[int, ...] = tuple(TIER_FACTOR**k for k in range(1, 11))  # 8 … 8**10 (≈ 1.07e9)
STORED_TIERS = TIERS[1:]  # kept in the store; views at TIERS[0] aggregate raw points
DEFAULT_POINTS = 1000
MAX_POINTS = 10_000
MAX_TAG = 256
MAX_SOURCE = 512
# Control characters (C0, DEL, C1) in a metric name: PostgreSQL's text cannot hold NUL, and
# the others draw nothing, or move the cursor, wherever the name is shown (a fixed set, unlike
# str.isprintable, which follows the Python version's Unicode tables)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The collector's own samples of a member's GPUs, CPU and memory (docs/telemetry.md, "The
# system source"): sources named system#<generation>, which no metrics file can be named
SYSTEM_SOURCE = "system"


def tag_refused(tag: str) -> bool:
    """Whether the gateway refuses ``tag`` as a metric name: empty, longer than ``MAX_TAG``,
    or holding a control character (lone surrogates cannot reach it: the wire is UTF-8)."""
    return not 0 < len(tag) <= MAX_TAG or _CONTROL.search(tag) is not None


def is_system_source(source: str) -> bool:
    return source.rpartition("#")[0] == SYSTEM_SOURCE


def run_of(source: str) -> str:
    """The *run* a source belongs to: the directory of its file below the metrics directory
    (``loss_train`` for ``loss_train/events.out.tfevents.1#0``; ``""`` at the top). TensorBoard
    writes each ``add_scalars`` sub-run to a directory of its own under one tag, so series that
    share a tag but not a run are separate curves."""
    path = source.rpartition("#")[0] or source
    return path.rpartition("/")[0]


MAX_STEP = 2**63 - 1  # steps are int64 on the wire and in the database


class Scalar(NamedTuple):  # a tuple: made millions of times a second by the parsers
    tag: str
    step: int
    wall_time: float
    value: float


class Record(NamedTuple):
    """One record of a source: its byte offset (the deduplication key) and its scalars.

    A record may hold no scalar (a TensorBoard file-version event, a histogram): it still
    advances the source, and is simply not stored.
    """

    offset: int
    scalars: tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class MemberScope:
    """Whom a collector token speaks for: one member of one attempt of one job."""

    job_id: str
    attempt_id: str
    member_id: str
    member_index: int


class PointColumns(Protocol):
    """A source's points as columns (per point: record offset, tag, step, wall time, value;
    adapters keep them in arrays). The adapter that decodes them checks the columns agree,
    offsets never go backwards and steps and offsets lie in range
    (``adapters.telemetry.columns.Points.check``)."""

    tags: list[str]

    def __len__(self) -> int: ...


@dataclass(slots=True)
class SourceBatch:
    """Points of one source, in record order."""

    source: str
    kind: SourceKind
    points: PointColumns

    def __len__(self) -> int:
        return len(self.points)

    def check(self) -> None:
        """Refuse a malformed batch before anything is written."""
        if not self.source or len(self.source) > MAX_SOURCE:
            raise InvalidInput(
                f"a source name must have 1 to {MAX_SOURCE} characters", fix="shorten the path"
            )
        if self.kind not in SOURCE_KINDS:
            raise InvalidInput(
                f"unknown source kind {self.kind!r}", fix=f"use one of {', '.join(SOURCE_KINDS)}"
            )
        tags = self.points.tags
        for tag in tags:
            if not tag or len(tag) > MAX_TAG:
                raise InvalidInput(
                    f"a metric name must have 1 to {MAX_TAG} characters: {tag[:40]!r}",
                    fix="shorten the tag",
                )
        if _CONTROL.search("".join(tags)):  # one pass over the names, in C
            bad = next(t for t in tags if _CONTROL.search(t))
            raise InvalidInput(
                f"a metric name holds a control character: {bad[:40]!r}",
                fix="leave NUL and other control characters out of metric names",
            )


@dataclass(frozen=True, slots=True)
class Appended:
    accepted: int  # points stored now
    duplicates: int  # points of records stored before (a resend)


@dataclass(slots=True)
class Bucket:
    """Aggregate of a series over ``[bucket * width, (bucket + 1) * width)`` steps.

    ``minimum``/``maximum``/``total``/``count`` cover the finite values only; ``last`` is the
    value at the highest step (NaN included: a diverged loss shows).
    """

    bucket: int
    first_step: int
    last_step: int
    minimum: float | None
    maximum: float | None
    total: float
    count: int
    last: float
    min_wall: float
    max_wall: float

    def merge(self, other: Bucket) -> None:
        self.first_step = min(self.first_step, other.first_step)
        if other.last_step >= self.last_step:
            self.last_step, self.last = other.last_step, other.last
        self.minimum = _pick(min, self.minimum, other.minimum)
        self.maximum = _pick(max, self.maximum, other.maximum)
        self.total += other.total
        self.count += other.count
        self.min_wall = min(self.min_wall, other.min_wall)
        self.max_wall = max(self.max_wall, other.max_wall)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def _pick(f: Callable[[float, float], float], a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return f(a, b)


def point_bucket(step: int, wall: float, value: float, width: int) -> Bucket:
    finite = math.isfinite(value)
    return Bucket(
        bucket=step // width,
        first_step=step,
        last_step=step,
        minimum=value if finite else None,
        maximum=value if finite else None,
        total=value if finite else 0.0,
        count=1 if finite else 0,
        last=value,
        min_wall=wall,
        max_wall=wall,
    )


def rollup(
    points: Iterable[tuple[int, int, float, float]],
) -> dict[int, dict[tuple[int, int], Bucket]]:
    """Aggregate ``(series, step, wall, value)`` points into every tier.

    Returns ``{width: {(series, bucket): Bucket}}``. The finest tier is built from the points,
    each coarser one from the tier below it, so the work is about ``len(points) * 8/7``.
    """
    tiers: dict[int, dict[tuple[int, int], Bucket]] = {}
    finest: dict[tuple[int, int], Bucket] = {}
    width = TIERS[0]
    for series, step, wall, value in points:
        key = (series, step // width)
        new = point_bucket(step, wall, value, width)
        old = finest.get(key)
        if old is None:
            finest[key] = new
        else:
            old.merge(new)
    tiers[width] = finest
    below = finest
    for width in TIERS[1:]:
        level: dict[tuple[int, int], Bucket] = {}
        for (series, _), b in below.items():
            key = (series, b.first_step // width)
            old = level.get(key)
            if old is None:
                level[key] = Bucket(
                    key[1], b.first_step, b.last_step, b.minimum, b.maximum, b.total,
                    b.count, b.last, b.min_wall, b.max_wall,
                )  # fmt: skip
            else:
                old.merge(b)
        tiers[width] = level
        below = level
    return tiers


@dataclass(frozen=True, slots=True)
class View:
    """How to answer a query over ``[start, end]`` steps: raw points (width 1) or one tier."""

    start: int
    end: int
    width: int

    @property
    def raw(self) -> bool:
        return self.width == 1

    @property
    def stored(self) -> bool:
        """Read from a stored rollup tier (else from raw points, aggregated if width > 1)."""
        return self.width in STORED_TIERS


def plan_view(start: int, end: int, points: int = DEFAULT_POINTS) -> View:
    """The finest resolution at which ``[start, end]`` holds at most ``points`` buckets."""
    if not 1 <= points <= MAX_POINTS:
        raise InvalidInput(
            f"points must be between 1 and {MAX_POINTS}, not {points}",
            fix=f"ask for at most {MAX_POINTS} points (the default is {DEFAULT_POINTS})",
        )
    if start < 0 or end < start:
        raise InvalidInput(
            f"the step range {start}..{end} is empty or negative",
            fix="give 0 <= start <= end",
        )
    for width in (1, *TIERS):
        if end // width - start // width + 1 <= points:
            return View(start, end, width)
    return View(start, end, TIERS[-1])  # beyond 8**10 × points steps: the coarsest tier


def later_attempts_win(
    ranges: Sequence[tuple[int, int, int]],
) -> dict[int, list[tuple[int, int]]]:
    """Which step ranges of each attempt a canonical curve shows.

    ``ranges``: ``(attempt number, first step, last step)`` per attempt that has points. An
    attempt is shown where no later attempt has points, judged by each later attempt's
    ``[first step, last step]`` span (a resumed attempt that starts again at step 5,000 hides
    the earlier attempt from 5,000 up to where it has reached). Returns the visible inclusive
    ranges per attempt number.
    """
    shown: dict[int, list[tuple[int, int]]] = {}
    ordered = sorted(ranges)
    for i, (number, first, last) in enumerate(ordered):
        visible = [(first, last)]
        for _, later_first, later_last in ordered[i + 1 :]:
            visible = _subtract(visible, later_first, later_last)
        shown[number] = visible
    return shown


def _subtract(spans: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if hi < a or lo > b:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, lo - 1))
        if hi < b:
            out.append((hi + 1, b))
    return out


def sparkline(peaks: Sequence[float], width: int = 24) -> str:
    """A text sparkline ``width`` characters wide (``tp job metrics``): ``peaks`` are the
    buckets' maxima in step order; when there are more than ``width``, each character draws
    the largest of the buckets it covers, so a one-step spike stays visible. Fewer finite
    values than ``width`` draw one character each (nothing is invented between them)."""
    ticks = "▁▂▃▄▅▆▇█"
    finite = [v for v in peaks if math.isfinite(v)]
    if not finite or width < 1:
        return ""
    if len(finite) > width:
        columns: list[float] = [-math.inf] * width
        for i, v in enumerate(finite):
            c = i * width // len(finite)
            columns[c] = max(columns[c], v)
        finite = columns
    lo, hi = min(finite), max(finite)
    if hi == lo:
        return ticks[3] * len(finite)
    return "".join(ticks[round((v - lo) / (hi - lo) * (len(ticks) - 1))] for v in finite)


@dataclass(frozen=True, slots=True)
class UsageSource:
    """Where a started member's CPU and memory use can be read on its host (the collector
    samples it: docs/telemetry.md, "The system source").

    ``pid``: the member's first process as the host sees it (None: not known). ``cgroups``:
    the absolute directories of its control groups, all of whose processes are the member's:
    on a cgroup v2 host the one directory (``cpu.stat``, ``memory.current``), on a v1 host the
    ``cpuacct`` and ``memory`` controllers' directories (``cpuacct.usage``,
    ``memory.usage_in_bytes``); empty when the member has no cgroup of its own (a host process
    in the daemon's cgroup): then its process tree is read through ``/proc``."""

    pid: int | None = None
    cgroups: tuple[str, ...] = ()
