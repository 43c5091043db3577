"""`tp job metrics ID`: the latest value of each canonical metric with a text sparkline, then
member 0's system series (GPUs, CPU, memory) in a group of their own."""

from __future__ import annotations

import math
from typing import Annotated, Any

from cyclopts import Parameter

from domain.telemetry import is_system_source, sparkline
from entrypoints.cli import output
from entrypoints.cli.client import connect
from entrypoints.cli.jobs import JsonFlag, job_app, job_path

TREND_POINTS = 24


def _number(value: Any) -> str:
    if value is None:
        return "nan"
    return f"{value:.6g}"


def _trend(curve: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    merged = curve.get("merged") or []
    values = [p["last"] if p["last"] is not None else math.nan for p in merged]
    return sparkline(values, TREND_POINTS), (merged[-1] if merged else None)


def _rows(tags: list[str], curves: dict[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for t in tags:
        trend, last = _trend(curves[t])
        if last is None:
            continue
        attempts = len(curves[t]["attempts"])
        rows.append(
            (t, last["last_step"], _number(last["last"]), trend,
             f"#{last['attempt']}" + (f" of {attempts}" if attempts > 1 else ""))
        )  # fmt: skip
    return rows


@job_app.command(name="metrics")
def metrics(
    job_id: str,
    /,
    *,
    tag: Annotated[
        list[str] | None, Parameter(name="--tag", help="only these metrics (repeatable)")
    ] = None,
    all_tags: Annotated[
        bool, Parameter(name="--all", help="every metric, not only the canonical ones")
    ] = False,
    json: JsonFlag = False,
) -> int:
    """Print a job's latest metric values with a sparkline of each curve (all attempts; a
    later attempt wins the steps it covers).

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    with connect() as api:
        summary = api.get(job_path(job_id, "/metrics"))
        system = [] if tag else list(summary.get("system") or [])
        if tag:
            tags = tag
        elif all_tags:
            training = {s["tag"] for s in summary["series"] if not is_system_source(s["source"])}
            tags = sorted(training) + system
        else:
            tags = summary["canonical"] + system
        curves = {
            t: api.get(job_path(job_id, "/metrics/curve"), {"tag": t, "points": TREND_POINTS})
            for t in dict.fromkeys(tags)
        }
    if json:
        output.print_json({"summary": summary, "curves": curves})
        return 0
    if not tags:
        output.info(f"no metrics yet for job {job_id}{_why_none(job_id)}")
        return 0
    headers = ["METRIC", "STEP", "LAST", "TREND", "ATTEMPT"]
    training_tags = [t for t in tags if t not in system]
    if training_tags or not system:
        output.table(headers, _rows(training_tags, curves))
    if system:  # its own group, after the training curves
        heading = "system (member 0's GPUs, CPU and memory, sampled by its node; STEP: sample)"
        output.out.print(("\n" if training_tags else "") + heading, markup=False)
        output.table(headers, _rows(system, curves))
    for c in summary.get("collectors") or []:
        skipped = c["corrupt_records"] + c["dropped_records"]
        if skipped or c["dropped_bytes"]:
            output.warn(
                f"member {c['member_id']}: collector skipped {c['corrupt_records']} corrupt and"
                f" dropped {c['dropped_records']} records, {c['dropped_bytes']} bytes unread"
            )
    return 0


def _why_none(job_id: str) -> str:
    """Why a job has no metrics: its backend collects none (docs/backends.md), or its collector
    has not shipped any yet."""
    with connect() as api:
        backend = api.get(job_path(job_id))["backend"]
    if backend in NO_METRICS:
        return (
            f": the {backend} backend collects no metrics (docs/backends.md); run it on a pool of"
            " node daemons (`tp up` starts one) to have TensorBoard and JSONL files collected"
        )
    return (
        " (its collector ships what the job writes as TensorBoard events or JSONL under"
        " $TUNEPLANE_METRICS_DIR)"
    )


NO_METRICS = {"local"}  # the `metrics` row of docs/backends.md's capability table
