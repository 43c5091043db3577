"""`tp job metrics ID`: the latest value of each canonical metric with a text sparkline, then
member 0's system series (GPUs, CPU and memory) in a group of their own; `--raw` is the raw
inspector (entrypoints/cli/job_metrics_raw.py).

A metric logged in several runs (TensorBoard's ``add_scalars`` writes each sub-run to a
directory of its own under one tag) is a row per run: ``loss (loss_train)``, ``loss
(loss_val)``. Values that are not finite print as ``NaN``, ``Infinity`` and ``-Infinity`` (the
API's strings, docs/http-api.md#numbers).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from cyclopts import Parameter

from domain.errors import InvalidInput
from domain.telemetry import MAX_POINTS, is_system_source, sparkline
from entrypoints.cli import output
from entrypoints.cli.client import connect
from entrypoints.cli.job_metrics_raw import RawOptions, raw_inspector
from entrypoints.cli.jobs import JsonFlag, job_path

DEFAULT_WIDTH = 24
MAX_WIDTH = 500
# buckets fetched per sparkline character: rollup tiers are 8× apart, so 8 per character
# gives at least one bucket per character once a series has that many steps
BUCKETS_PER_CHAR = 8
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def as_float(value: Any) -> float:
    """A value of the API (a number, "NaN", "Infinity", "-Infinity", or null) as a float."""
    if isinstance(value, str):
        return NON_FINITE.get(value, math.nan)
    return math.nan if value is None else float(value)


def _trend(curve: dict[str, Any], run: str, width: int) -> tuple[str, dict[str, Any] | None]:
    merged = [p for p in curve.get("merged") or [] if p.get("run", "") == run]
    # each bucket's largest finite value, so a spike inside a bucket shows; a bucket of no
    # finite value draws nothing
    peaks = [as_float(p["max"]) for p in merged]
    return sparkline(peaks, width), (merged[-1] if merged else None)


def _label(tag: str, run: str) -> str:
    return f"{tag} ({run})" if run else tag


def _rows(
    series: list[tuple[str, str]], curves: dict[str, Any], width: int
) -> list[tuple[Any, ...]]:
    rows = []
    for tag, run in series:
        trend, last = _trend(curves[tag], run, width)
        if last is None:
            continue
        attempts = len({a["attempt"] for a in curves[tag]["attempts"] if a.get("run", "") == run})
        rows.append(
            (_label(tag, run), last["last_step"], output.metric_value(last["last"]), trend,
             f"#{last['attempt']}" + (f" of {attempts}" if attempts > 1 else ""))
        )  # fmt: skip
    return rows


def _with_runs(tags: list[str], runs: dict[str, list[str]]) -> list[tuple[str, str]]:
    return [(t, r) for t in tags for r in (runs.get(t) or [""])]


def metrics(
    job_id: str,
    /,
    *,
    tag: Annotated[
        list[str] | None, Parameter(name="--tag", help="only these metrics (repeatable)")
    ] = None,
    all_tags: Annotated[
        bool, Parameter(name="--all", help="every metric of member 0, not only the canonical ones")
    ] = False,
    width: Annotated[
        int, Parameter(name="--width", help="characters per sparkline (1 to 500)")
    ] = DEFAULT_WIDTH,
    raw: Annotated[
        bool,
        Parameter(name="--raw", help="the raw inspector: a series' points as logged (see below)"),
    ] = False,
    raw_options: RawOptions | None = None,
    json: JsonFlag = False,
) -> int:
    """Print a job's latest metric values with a sparkline of each curve (all attempts; a
    later attempt wins the steps it covers; each character draws the largest value of the
    steps it covers, so a spike shows).

    With --raw, the raw inspector: without --tag, the job's series (attempt, member, source,
    tag, points); with --tag, one series' points as logged, a page at a time (--attempt,
    --member, --source pick the series; --start, --after-offset, --limit page).

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    if not 1 <= width <= MAX_WIDTH:
        raise InvalidInput(
            f"--width {width} is out of range",
            fix=f"give --width 1 to {MAX_WIDTH} (characters per sparkline)",
            field="--width",
        )
    if raw:
        return raw_inspector(job_id, tag or [], raw_options or RawOptions(), json)
    if raw_options is not None and raw_options != RawOptions():
        raise InvalidInput(
            "--attempt, --member, --source, --start, --after-offset and --limit belong to --raw",
            fix="add --raw to inspect one series' points",
            field="--raw",
        )
    points = min(width * BUCKETS_PER_CHAR, MAX_POINTS)
    with connect() as api:
        summary = api.get(job_path(job_id, "/metrics"))
        system = [] if tag else list(summary.get("system") or [])
        tags = tag or chosen_tags(summary, all_tags)
        curves = {
            t: api.get(job_path(job_id, "/metrics/curve"), {"tag": t, "points": points})
            for t in dict.fromkeys(tags)
        }
    if json:
        output.print_json({"summary": summary, "curves": curves})
        return 0
    if not tags:
        output.info(f"no metrics yet for job {job_id}{_why_none(job_id)}")
        return 0
    runs = summary.get("runs") or {}
    headers = ["METRIC", "STEP", "LAST", "TREND", "ATTEMPT"]
    training_tags = [t for t in tags if t not in system]
    if training_tags or not system:
        output.table(headers, _rows(_with_runs(training_tags, runs), curves, width))
    if system:  # its own group, after the training curves
        heading = "system (member 0's GPUs, CPU and memory, sampled by its node; STEP: sample)"
        output.out.print(("\n" if training_tags else "") + heading, markup=False)
        output.table(headers, _rows(_with_runs(system, runs), curves, width))
    for c in summary.get("collectors") or []:
        skipped = c["corrupt_records"] + c["dropped_records"]
        if skipped or c["dropped_bytes"]:
            output.warn(
                f"member {c['member_id']}: collector skipped {c['corrupt_records']} corrupt and"
                f" dropped {c['dropped_records']} records, {c['dropped_bytes']} bytes unread"
            )
    return 0


def chosen_tags(summary: dict[str, Any], all_tags: bool) -> list[str]:
    """The metrics drawn without --tag: the canonical ones, or with --all every training tag,
    then the system group. Only member 0's: a curve is member 0's series (as in the console),
    so a tag that only another member reported has no curve to ask for."""
    system = list(summary.get("system") or [])
    if not all_tags:
        return list(summary["canonical"]) + system
    training = {
        s["tag"]
        for s in summary["series"]
        if s["member"] == 0 and not is_system_source(s["source"])
    }
    return sorted(training) + system


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
