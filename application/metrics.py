"""Reading a job's metrics: canonical curves, the raw scalar inspector, the latest values.

*Canonical* metrics are the recipe's primary metrics (every metric when it declares none) as
reported by member 0 of each attempt: training code logs on rank 0. A curve overlays the
attempts and also merges them, a later attempt winning over the steps it covers
(``domain.telemetry.later_attempts_win``). Every read is bounded: at most ``points`` buckets
per attempt, each read from one rollup row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from application.context import Context
from application.jobs import get_job
from domain.auth import Principal
from domain.errors import InvalidInput, NotFound
from domain.telemetry import (
    DEFAULT_POINTS,
    Bucket,
    View,
    is_system_source,
    later_attempts_win,
    plan_view,
    run_of,
)
from domain.telemetry_ports import MetricsStore, RawPoint, SeriesInfo, TelemetryCounts

MAX_RAW = 5000
CANONICAL_MEMBER = 0


@dataclass(frozen=True, slots=True)
class AttemptCurve:
    attempt: int
    series: SeriesInfo
    buckets: list[Bucket]
    shown: list[tuple[int, int]]  # the step ranges where this attempt is the canonical one
    run: str = ""  # the sub-run (``domain.telemetry.run_of``); "" for the top directory


@dataclass(frozen=True, slots=True)
class Curve:
    tag: str
    start: int
    end: int
    width: int  # steps per bucket (1: raw points)
    attempts: list[AttemptCurve]  # one per (attempt, run), by run then attempt

    @property
    def merged(self) -> list[tuple[int, str, Bucket]]:
        """(attempt number, run, bucket), by run then step: per run and bucket, the latest
        attempt shown there. Runs are never merged with each other."""
        chosen: dict[tuple[str, int], tuple[int, str, Bucket]] = {}
        for curve in sorted(self.attempts, key=lambda c: (c.run, c.attempt)):
            for b in curve.buckets:
                if any(lo <= b.last_step and b.first_step <= hi for lo, hi in curve.shown):
                    chosen[(curve.run, b.bucket)] = (curve.attempt, curve.run, b)
        return [chosen[k] for k in sorted(chosen)]


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    primary: tuple[str, ...]
    series: list[SeriesInfo]  # every series of the job
    counts: list[TelemetryCounts]


def _store(ctx: Context) -> MetricsStore:
    if ctx.metrics is None:
        raise NotFound(
            "this server keeps no metrics", fix="ask the control plane (tp serve / tp up)"
        )
    return ctx.metrics


async def _primary(ctx: Context, principal: Principal, job_id: str) -> tuple[str, ...]:
    details = await get_job(ctx, principal, job_id)  # NotFound unless the caller may see it
    try:
        return ctx.catalog.method(details.job.spec.method).primary_metrics
    except InvalidInput:  # a method removed from the catalog since
        return ()


async def summary(ctx: Context, principal: Principal, job_id: str) -> MetricsSummary:
    primary = await _primary(ctx, principal, job_id)
    store = _store(ctx)
    return MetricsSummary(primary, await store.series(job_id), await store.counts(job_id))


def canonical_tags(summary: MetricsSummary) -> list[str]:
    """The recipe's primary metrics that have points, else every tag member 0 reported (its
    system source's apart: ``system_tags``)."""
    reported = sorted(
        {
            s.tag
            for s in summary.series
            if s.member == CANONICAL_MEMBER and not is_system_source(s.source)
        }
    )
    primary = [t for t in summary.primary if t in reported]
    return primary or reported


def system_tags(summary: MetricsSummary) -> list[str]:
    """Member 0's GPU, CPU and memory series, sampled by its collector (the system source),
    in a stable order: GPUs by ordinal, then CPU and memory."""
    tags = {
        s.tag for s in summary.series if s.member == CANONICAL_MEMBER and is_system_source(s.source)
    }
    return sorted(tags, key=_system_order)


def _system_order(tag: str) -> tuple[int, int, str]:
    parts = tag.split("/")
    if len(parts) == 3 and parts[1].startswith("gpu") and parts[1][3:].isdigit():
        return (0, int(parts[1][3:]), parts[2])
    return (1, 0, tag)


async def curve(
    ctx: Context,
    principal: Principal,
    job_id: str,
    tag: str,
    *,
    start: int | None = None,
    end: int | None = None,
    start_time: float | None = None,
    end_time: float | None = None,
    points: int = DEFAULT_POINTS,
    run: str | None = None,
) -> Curve:
    """Member 0's series of ``tag`` in each attempt over a step range, or over a wall-time
    range (each attempt's steps logged in it), at most ``points`` buckets per attempt and run.

    Series of ``tag`` in different runs (``add_scalars`` sub-runs: ``run_of``) are separate
    curves; ``run`` asks for one of them, None for every run."""
    by_time = start_time is not None or end_time is not None
    if by_time and (start is not None or end is not None):
        raise InvalidInput(
            "a curve is asked for by steps or by time, not both",
            fix="give start/end (steps) or start_time/end_time (seconds since the epoch)",
            field="start_time",
        )
    if start_time is not None and end_time is not None and not start_time <= end_time:
        raise InvalidInput(  # as an empty step range is (plan_view), not an empty curve
            f"the time range {start_time}..{end_time} is empty",
            fix="give start_time <= end_time (seconds since the epoch)",
            field="end_time",
        )
    await _primary(ctx, principal, job_id)
    store = _store(ctx)
    chosen: dict[tuple[str, int], SeriesInfo] = {}  # (run, attempt) → series
    runs: set[str] = set()
    for s in await store.series(job_id, [tag]):
        if s.member != CANONICAL_MEMBER:
            continue
        runs.add(run_of(s.source))
        if run is not None and run_of(s.source) != run:
            continue
        key = (run_of(s.source), s.attempt)
        best = chosen.get(key)
        if best is None or s.count > best.count:  # several files of one tag and run: the fullest
            chosen[key] = s
    if not chosen:
        if run is not None and runs:
            raise NotFound(
                f"job {job_id} has no run {run!r} of metric {tag!r}",
                fix="ask for one of its runs: " + ", ".join(repr(r) for r in sorted(runs)),
                field="run",
            )
        raise NotFound(
            f"job {job_id} has no metric {tag!r}",
            fix=f"list its metrics with `tp job metrics {job_id}`",
            field="tag",
        )
    spans = {k: (s.first_step, s.last_step) for k, s in chosen.items()}
    if by_time:
        t0 = -math.inf if start_time is None else start_time
        t1 = math.inf if end_time is None else end_time
        for k, s in chosen.items():
            found = await store.steps_between(s.id, t0, t1)
            if found is None:
                del spans[k]
            else:
                spans[k] = found
        if not spans:
            return Curve(tag, 0, 0, 1, [])
        lo, hi = min(a for a, _ in spans.values()), max(b for _, b in spans.values())
    else:
        lo = min(a for a, _ in spans.values()) if start is None else start
        hi = max(b for _, b in spans.values()) if end is None else end
    view = plan_view(lo, hi, points)
    shown: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in sorted({r for r, _ in chosen}):
        mine = [(n, s.first_step, s.last_step) for (rr, n), s in chosen.items() if rr == r]
        shown.update({(r, n): ranges for n, ranges in later_attempts_win(mine).items()})
    curves = []
    for key in sorted(spans):
        own = view
        if by_time:  # the same bucket grid, this attempt's steps in the time range only
            own = View(spans[key][0], spans[key][1], view.width)
        s = chosen[key]
        buckets = await store.view(s.id, own)
        curves.append(AttemptCurve(key[1], s, buckets, shown[key], key[0]))
    return Curve(tag, view.start, view.end, view.width, curves)


def runs_by_tag(summary: MetricsSummary) -> dict[str, list[str]]:
    """Member 0's runs of each tag it reported (``run_of``), sorted; a tag of one run in the
    top directory has ``[""]``."""
    found: dict[str, set[str]] = {}
    for s in summary.series:
        if s.member == CANONICAL_MEMBER:
            found.setdefault(s.tag, set()).add(run_of(s.source))
    return {t: sorted(r) for t, r in sorted(found.items())}


async def raw_points(
    ctx: Context,
    principal: Principal,
    job_id: str,
    *,
    attempt: int,
    member: int,
    source: str,
    tag: str,
    start: int = 0,
    end: int = 2**63 - 1,
    after_offset: int = -1,
    limit: int = 1000,
) -> tuple[SeriesInfo, list[RawPoint]]:
    """The raw inspector: one series' points in step order, a page at a time."""
    if not 1 <= limit <= MAX_RAW:
        raise InvalidInput(
            f"limit {limit} is out of range",
            fix=f"ask for 1 to {MAX_RAW} points and page with the last step and offset",
            field="limit",
        )
    await _primary(ctx, principal, job_id)
    store = _store(ctx)
    for s in await store.series(job_id, [tag]):
        if (s.attempt, s.member, s.source) == (attempt, member, source):
            return s, await store.raw(s.id, start, end, after_offset, limit)
    raise NotFound(
        f"job {job_id} has no series {tag!r} from member {member} of attempt {attempt}"
        f" in {source!r}",
        fix=f"list its series with GET /v1/jobs/{job_id}/metrics",
        field="source",
    )
