"""HTTP routes of training metrics: a job's series, bounded curves and the raw inspector.

JSON has no NaN or infinities, so a value that is not finite (a diverged loss) is the string
``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` in the fields that carry a value as logged
(``value``, ``last``, ``last_value``); a bucket's ``min``, ``max`` and ``mean`` cover its
finite values only and are ``null`` when it has none (docs/http-api.md, Numbers).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from litestar import get
from litestar.datastructures import State
from litestar.params import FromPath, Parameter
from msgspec import Struct

from application import metrics
from application.context import Context
from domain.telemetry import DEFAULT_POINTS, MAX_POINTS, Bucket, run_of
from domain.telemetry_ports import SeriesInfo, TelemetryCounts
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller

NonFinite = Literal["NaN", "Infinity", "-Infinity"]
Number = float | NonFinite  # a logged value: a JSON number, or one of these three strings


def number(value: float) -> Number:
    """A logged value for JSON: itself when finite, else "NaN", "Infinity" or "-Infinity"."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


INT64 = 2**63 - 1
# (litestar leaves a bound of 0 out of the document; schema_extra puts it back)
Step = Annotated[int | None, Parameter(ge=0, le=INT64, schema_extra={"minimum": 0})]
# seconds since the epoch, up to the last second of year 9999 (a datetime's range)
Seconds = Annotated[float | None, Parameter(ge=0, le=253_402_300_799, schema_extra={"minimum": 0})]


class SeriesOut(Struct):
    attempt: int
    attempt_id: str
    member: int
    member_id: str
    source: str
    tag: str
    first_step: int
    last_step: int
    count: int
    last_value: Number
    last_wall_time: float
    run: str = ""  # the sub-run: the source's directory below the metrics directory


class CollectorOut(Struct):
    member_id: str
    points: int
    duplicates: int
    corrupt_records: int
    dropped_records: int
    dropped_bytes: int


class MetricsOut(Struct):
    primary: list[str]
    canonical: list[str]
    series: list[SeriesOut]
    collectors: list[CollectorOut]
    # member 0's GPU, CPU and memory series, sampled by its node's collector (source system#N)
    system: list[str] = []
    # member 0's runs of each tag (add_scalars sub-runs: a directory each; "" the top one)
    runs: dict[str, list[str]] = {}


class PointOut(Struct):
    first_step: int
    last_step: int
    min: float | None
    max: float | None
    mean: float | None
    last: Number
    count: int
    first_wall_time: float
    last_wall_time: float


class MergedPointOut(PointOut):
    attempt: int
    run: str = ""


class AttemptCurveOut(Struct):
    attempt: int
    member_id: str
    source: str
    shown: list[tuple[int, int]]
    points: list[PointOut]
    run: str = ""  # one entry per (attempt, run): runs are separate curves


class CurveOut(Struct):
    tag: str
    start: int
    end: int
    width: int
    attempts: list[AttemptCurveOut]
    merged: list[MergedPointOut]


class RawPointOut(Struct):
    step: int
    wall_time: float
    value: Number
    offset: int


class RawOut(Struct):
    series: SeriesOut
    points: list[RawPointOut]
    next_start: int | None
    next_after_offset: int | None


def _series_out(s: SeriesInfo) -> SeriesOut:
    return SeriesOut(
        s.attempt, s.attempt_id, s.member, s.member_id, s.source, s.tag, s.first_step,
        s.last_step, s.count, number(s.last_value), s.last_wall, run_of(s.source),
    )  # fmt: skip


def _point(b: Bucket) -> PointOut:
    return PointOut(
        b.first_step, b.last_step, b.minimum, b.maximum, b.mean, number(b.last), b.count,
        b.min_wall, b.max_wall,
    )  # fmt: skip


def _collector_out(c: TelemetryCounts) -> CollectorOut:
    return CollectorOut(
        c.member_id, c.points, c.duplicates, c.corrupt_records, c.dropped_records, c.dropped_bytes
    )


def _merged(attempt: int, run: str, b: Bucket) -> MergedPointOut:
    return MergedPointOut(
        b.first_step, b.last_step, b.minimum, b.maximum, b.mean, number(b.last), b.count,
        b.min_wall, b.max_wall, attempt, run,
    )  # fmt: skip


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


@get(
    "/v1/jobs/{job_id:str}/metrics",
    responses=responses(400, 401, 404),
    summary="A job's metric series, its canonical metrics and its collectors' counters",
)
async def job_metrics(job_id: FromPath[str], state: State, principal: Caller) -> MetricsOut:
    found = await metrics.summary(_ctx(state), principal, job_id)
    return MetricsOut(
        list(found.primary),
        metrics.canonical_tags(found),
        [_series_out(s) for s in found.series],
        [_collector_out(c) for c in found.counts],
        metrics.system_tags(found),
        metrics.runs_by_tag(found),
    )


@get(
    "/v1/jobs/{job_id:str}/metrics/curve",
    responses=responses(400, 401, 404, 422),
    summary="One canonical metric over a step or time range, at most `points` buckets per attempt",
)
async def job_curve(
    job_id: FromPath[str],
    state: State,
    principal: Caller,
    tag: Annotated[str, Parameter(min_length=1, max_length=256)],
    start: Step = None,
    end: Step = None,
    start_time: Seconds = None,
    end_time: Seconds = None,
    points: Annotated[int, Parameter(ge=1, le=MAX_POINTS)] = DEFAULT_POINTS,
    run: Annotated[
        str | None,
        Parameter(
            max_length=512,
            description='only this sub-run (a directory below the metrics directory; "" the'
            " top one); default: every run, each a curve of its own",
        ),
    ] = None,
) -> CurveOut:
    c = await metrics.curve(
        _ctx(state),
        principal,
        job_id,
        tag,
        start=start,
        end=end,
        start_time=start_time,
        end_time=end_time,
        points=points,
        run=run,
    )
    return CurveOut(
        c.tag,
        c.start,
        c.end,
        c.width,
        [
            AttemptCurveOut(
                a.attempt,
                a.series.member_id,
                a.series.source,
                a.shown,
                [_point(b) for b in a.buckets],
                a.run,
            )
            for a in c.attempts
        ],
        [_merged(n, r, b) for n, r, b in c.merged],
    )


@get(
    "/v1/jobs/{job_id:str}/metrics/raw",
    responses=responses(400, 401, 404, 422),
    summary="Raw scalars of one series (attempt, member, source, tag), a page at a time",
)
async def job_raw_metrics(
    job_id: FromPath[str],
    state: State,
    principal: Caller,
    attempt: Annotated[int, Parameter(ge=1, le=2**31 - 1)],
    source: Annotated[str, Parameter(min_length=1, max_length=512)],
    tag: Annotated[str, Parameter(min_length=1, max_length=256)],
    member: Annotated[int, Parameter(ge=0, le=1024)] = 0,
    start: Annotated[int, Parameter(ge=0, le=INT64)] = 0,
    end: Annotated[int, Parameter(ge=0, le=INT64)] = INT64,
    after_offset: Annotated[int, Parameter(ge=-1, le=INT64)] = -1,
    limit: Annotated[int, Parameter(ge=1, le=metrics.MAX_RAW)] = 1000,
) -> RawOut:
    series, points = await metrics.raw_points(
        _ctx(state),
        principal,
        job_id,
        attempt=attempt,
        member=member,
        source=source,
        tag=tag,
        start=start,
        end=end,
        after_offset=after_offset,
        limit=limit,
    )
    full = len(points) == limit
    return RawOut(
        _series_out(series),
        [RawPointOut(p.step, p.wall_time, number(p.value), p.offset) for p in points],
        points[-1].step if full else None,
        points[-1].offset if full else None,
    )


METRICS_ROUTES = [job_metrics, job_curve, job_raw_metrics]
