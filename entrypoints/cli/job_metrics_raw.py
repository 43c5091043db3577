"""`tp job metrics ID --raw`: the raw inspector (GET /v1/jobs/{id}/metrics/raw).

Without ``--tag``: the job's series, one row each (attempt, member, source, run, tag, steps,
points, last value). With one ``--tag``: that series' points as logged, in (step, record
offset) order, a page at a time; ``--attempt`` (default: the latest that logged it),
``--member`` (default 0) and ``--source`` (needed only when several files logged the tag)
pick the series, ``--start`` and ``--after-offset`` page (the command prints the next page's
command line), ``--limit`` sizes the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from cyclopts import Parameter

from domain.errors import InvalidInput, NotFound
from entrypoints.cli import output
from entrypoints.cli.client import connect
from entrypoints.cli.jobs import job_path

MAX_LIMIT = 5000  # the server's page limit (application.metrics.MAX_RAW)
INT64 = 2**63 - 1


@Parameter(name="*")
@dataclass(frozen=True)
class RawOptions:
    attempt: Annotated[
        int | None,
        Parameter(name="--attempt", help="--raw: the attempt (default: the latest with the tag)"),
    ] = None
    member: Annotated[
        int | None, Parameter(name="--member", help="--raw: the member's index (default 0)")
    ] = None
    source: Annotated[
        str | None,
        Parameter(name="--source", help="--raw: the source (file#generation), when several"),
    ] = None
    start: Annotated[int, Parameter(name="--start", help="--raw: from this step")] = 0
    after_offset: Annotated[
        int, Parameter(name="--after-offset", help="--raw: after this record offset (paging)")
    ] = -1
    limit: Annotated[int, Parameter(name="--limit", help="--raw: points per page")] = 100


def _check(o: RawOptions) -> None:
    bounds = [
        ("--attempt", o.attempt, 1, 2**31 - 1, "the attempt's number: 1 for the first"),
        ("--member", o.member, 0, 1024, "a member's index: 0 for the first"),
        ("--start", o.start, 0, INT64, "a step: 0 for the first"),
        ("--after-offset", o.after_offset, -1, INT64, "the offset the last page ended at"),
        ("--limit", o.limit, 1, MAX_LIMIT, f"1 to {MAX_LIMIT} points per page"),
    ]
    for flag, value, lo, hi, what in bounds:
        if value is not None and not lo <= value <= hi:
            raise InvalidInput(
                f"{flag} {value} is out of range", fix=f"give {flag} {what}", field=flag
            )
    if o.source is not None and not 1 <= len(o.source) <= 512:
        raise InvalidInput(
            "--source is empty or longer than 512 characters",
            fix="copy a SOURCE from `tp job metrics ID --raw`",
            field="--source",
        )


def _series_rows(series: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (f"#{s['attempt']}", s["member"], s["source"], s.get("run", ""), s["tag"],
         f"{s['first_step']}..{s['last_step']}", s["count"], output.metric_value(s["last_value"]))
        for s in sorted(series, key=lambda s: (s["attempt"], s["member"], s["source"], s["tag"]))
    ]  # fmt: skip


def _pick(job_id: str, tag: str, series: list[dict[str, Any]], o: RawOptions) -> dict[str, Any]:
    """The one series --tag, --attempt, --member and --source name, or a clear refusal."""
    member = 0 if o.member is None else o.member
    mine = [s for s in series if s["tag"] == tag and s["member"] == member]
    if o.source is not None:
        mine = [s for s in mine if s["source"] == o.source]
    if not mine:
        raise NotFound(
            f"job {job_id} has no series {tag!r} from member {member}"
            + (f" in {o.source!r}" if o.source else ""),
            fix=f"list its series with `tp job metrics {job_id} --raw`",
            field="--tag",
        )
    attempt = max(s["attempt"] for s in mine) if o.attempt is None else o.attempt
    mine = [s for s in mine if s["attempt"] == attempt]
    if not mine:
        raise NotFound(
            f"attempt {attempt} of job {job_id} has no series {tag!r} from member {member}",
            fix=f"list its series with `tp job metrics {job_id} --raw`",
            field="--attempt",
        )
    if len(mine) > 1:
        sources = ", ".join(sorted(s["source"] for s in mine))
        raise InvalidInput(
            f"{tag!r} of member {member} in attempt {attempt} comes from {len(mine)} sources:"
            f" {sources}",
            fix=f"pick one with --source {sorted(s['source'] for s in mine)[0]}",
            field="--source",
        )
    return mine[0]


def raw_inspector(job_id: str, tags: list[str], o: RawOptions, json: bool) -> int:
    _check(o)
    if len(tags) > 1:
        raise InvalidInput(
            f"--raw inspects one metric at a time, not {len(tags)}",
            fix="give one --tag (or none to list the job's series)",
            field="--tag",
        )
    with connect() as api:
        summary = api.get(job_path(job_id, "/metrics"))
        series = list(summary.get("series") or [])
        if not tags:
            if o.attempt is not None:
                series = [s for s in series if s["attempt"] == o.attempt]
            if o.member is not None:
                series = [s for s in series if s["member"] == o.member]
            if o.source is not None:
                series = [s for s in series if s["source"] == o.source]
            if json:
                output.print_json(series)
                return 0
            output.table(
                ["ATTEMPT", "MEMBER", "SOURCE", "RUN", "TAG", "STEPS", "POINTS", "LAST"],
                _series_rows(series),
            )
            if not series:
                output.info(f"no series for job {job_id} (as filtered)")
            return 0
        chosen = _pick(job_id, tags[0], series, o)
        query = {
            "attempt": chosen["attempt"], "member": chosen["member"], "source": chosen["source"],
            "tag": chosen["tag"], "start": o.start, "after_offset": o.after_offset,
            "limit": o.limit,
        }  # fmt: skip
        page = api.get(job_path(job_id, "/metrics/raw"), query)
    if json:
        output.print_json(page)
        return 0
    output.info(
        f"{chosen['tag']}: attempt {chosen['attempt']}, member {chosen['member']},"
        f" source {chosen['source']} ({chosen['count']} points)"
    )
    output.table(
        ["STEP", "VALUE", "WALL TIME", "OFFSET"],
        [(p["step"], output.metric_value(p["value"]), _when(p["wall_time"]), p["offset"])
         for p in page["points"]],
    )  # fmt: skip
    if page.get("next_start") is not None:
        output.info(
            f"next page: tp job metrics {job_id} --raw --tag {chosen['tag']!r}"
            f" --attempt {chosen['attempt']} --member {chosen['member']}"
            f" --source {chosen['source']!r} --start {page['next_start']}"
            f" --after-offset {page['next_after_offset']} --limit {o.limit}"
        )
    return 0


def _when(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(seconds)
