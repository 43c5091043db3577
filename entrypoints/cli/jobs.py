"""`tp job ls|status|events|why|logs|stop`, and the waiting/following that `tp submit` reuses."""

from __future__ import annotations

import sys
import time
from collections.abc import Collection
from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import Conflict, InvalidInput, NotFound
from domain.lifecycle import JOB_FINAL, JobState
from domain.retry import RetryPolicy
from entrypoints.cli import errors, output
from entrypoints.cli.client import Api, connect, seg
from entrypoints.cli.lazy import lazy

POLL_INTERVAL = 1.0  # seconds between state polls; tests shorten it
ACTIVE = (JobState.PENDING, JobState.STARTING, JobState.RUNNING, JobState.STOPPING)
NOT_STARTED = frozenset({JobState.PENDING.value, JobState.STARTING.value})
FINAL = frozenset(s.value for s in JOB_FINAL)
ACTIVE_VALUES = frozenset(s.value for s in ACTIVE)

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]
job_app = App(name="job", help="List, inspect, follow and stop jobs.")


def retry_words(policy: Any) -> str:
    """A spec's retry policy in words ("no retry (1 attempt)" when absent)."""
    try:
        return RetryPolicy.parse(policy or {}).words()
    except (InvalidInput, TypeError, AttributeError):  # a server newer than this CLI
        return str(policy)


def job_path(job_id: str, tail: str = "") -> str:
    return f"/v1/jobs/{seg(job_id)}{tail}"


def get_job(api: Api, job_id: str) -> dict[str, Any]:
    return dict(api.get(job_path(job_id)))


def describe_end(job: dict[str, Any]) -> str:
    text = f"job {job['id']} {job['state']}"
    if job.get("exit_code") is not None:
        text += f" (exit code {job['exit_code']})"
    if job.get("reason"):
        text += f": {job['reason']}"
    return text


def end_code(job: dict[str, Any]) -> int:
    """0 when the job succeeded or is still going, 1 when it ended any other way."""
    state = job.get("state")
    return errors.FAILED if state in FINAL and state != JobState.SUCCEEDED.value else errors.OK


def wait_while(api: Api, job_id: str, states: Collection[str], label: str) -> dict[str, Any]:
    """Poll the job while its state is in ``states``, showing a spinner with the state."""
    job = get_job(api, job_id)
    if job["state"] not in states:
        return job
    with output.spinner(f"{label} job {job_id}: {job['state']}") as spin:
        while job["state"] in states:
            time.sleep(POLL_INTERVAL)
            job = get_job(api, job_id)
            reason = f" ({job['reason']})" if job.get("reason") else ""
            spin.update(f"{label} job {job_id}: {job['state']}{reason}")
    return job


def stream_logs(api: Api, job_id: str, follow: bool, member: int = 0) -> None:
    """Copy the log stream (of member ``member``) to stdout as bytes arrive."""
    sink = getattr(sys.stdout, "buffer", None)
    query = {"follow": "true" if follow else "false", "member": str(member)}
    with api.stream(job_path(job_id, "/logs"), query) as body:
        for chunk in body:
            if sink is not None:
                sink.write(chunk)
                sink.flush()
            else:
                sys.stdout.write(chunk.decode("utf-8", "replace"))
                sys.stdout.flush()


def wait_to_start(api: Api, job_id: str) -> dict[str, Any]:
    """Poll a job until it has started (or ended), saying on stderr why it waits: a line each
    time the reason changes (quota, capacity, a cordoned node, backoff; `tp job why`), so a
    job that cannot start is never a silent wait."""
    job = get_job(api, job_id)
    said = ""
    while job["state"] in NOT_STARTED:
        if job["state"] == JobState.PENDING.value:
            why = api.get(job_path(job_id, "/why"))
            text = f"job {job_id} is pending: {why['text']}"
        else:
            reason = f": {job['reason']}" if job.get("reason") else ""
            text = f"job {job_id} is starting{reason}"
        if text != said:
            output.info(f"waiting: {text}")
            said = text
        time.sleep(POLL_INTERVAL)
        job = get_job(api, job_id)
    return job


def follow_job(api: Api, job_id: str) -> int:
    """Wait for the job to start, stream its logs until it ends, report how it ended."""
    job = wait_to_start(api, job_id)
    stream_logs(api, job_id, follow=job["state"] not in FINAL)
    job = wait_while(api, job_id, ACTIVE_VALUES, "ending")
    output.info(describe_end(job))
    return end_code(job)


def latest_job_id(api: Api) -> str:
    jobs = api.get("/v1/jobs", {"limit": 1}).get("jobs") or []
    if not jobs:
        raise NotFound("you have no jobs yet", fix="submit one with `tp submit NAME --profile P`")
    return str(jobs[0]["id"])


@job_app.command(name="ls")
def ls(
    *,
    state: Annotated[tuple[str, ...], Parameter(name="--state")] = (),
    all_: Annotated[bool, Parameter(name="--all")] = False,
    limit: Annotated[int, Parameter(name="--limit")] = 20,
    everyone: Annotated[bool, Parameter(name="--everyone")] = False,
    queue: Annotated[str | None, Parameter(name="--queue")] = None,
    owner: Annotated[str | None, Parameter(name="--owner")] = None,
    search: Annotated[str | None, Parameter(name="--search")] = None,
    json: JsonFlag = False,
) -> int:
    """List your jobs, newest first (by default only those not yet ended).

    Parameters
    ----------
    state
        Only jobs in this state (repeatable): pending, starting, running, stopping, succeeded,
        failed, cancelled.
    all_
        Include ended jobs (succeeded, failed, cancelled).
    limit
        At most this many jobs.
    everyone
        Every user's jobs, not only yours (admins, operators and viewers).
    queue
        Only jobs of this queue.
    owner
        Only this user's jobs (another user's: admins, operators and viewers).
    search
        Only jobs whose experiment, id or owner holds this text (case-insensitive; ``%`` and
        ``_`` are matched as themselves).
    """
    if limit < 1:
        raise InvalidInput(
            f"--limit {limit} lists nothing", fix="give --limit 1 or more", field="limit"
        )
    known = [s.value for s in JobState]
    if unknown := [s for s in state if s not in known]:
        raise InvalidInput(
            f"--state {unknown[0]!r} is not a job state",
            fix="give one of: " + ", ".join(known),
            field="state",
        )
    states = list(state) or ([] if all_ else [s.value for s in ACTIVE])
    jobs: list[dict[str, Any]] = []
    cursor: str | None = None
    with connect() as api:
        while len(jobs) < limit:
            params: dict[str, Any] = {"state": states, "limit": min(limit - len(jobs), 100)}
            if not states or JobState.PENDING.value in states:
                params["why"] = "true"  # why each pending job waits, in REASON
            if everyone:
                params["everyone"] = "true"
            if queue:
                params["queue"] = queue
            if owner:
                params["owner"] = owner
            if search is not None:
                params["q"] = search
            if cursor:
                params["cursor"] = cursor
            page = api.get("/v1/jobs", params)
            jobs.extend(page.get("jobs") or [])
            cursor = page.get("next_cursor")
            if not cursor or not page.get("jobs"):
                break
    jobs = jobs[:limit]
    if json:
        output.print_json(jobs)
        return 0
    output.table(
        ["ID", "STATE", "EXPERIMENT", "METHOD", "PROFILE", "BACKEND", "CREATED", "REASON"],
        [
            (j.get("id"), j.get("state"), j.get("experiment"), j.get("method"),
             j.get("profile"), j.get("backend"), output.short_time(j.get("created_at")),
             j.get("reason") or j.get("waits"))
            for j in jobs
        ],
    )  # fmt: skip
    if not jobs:
        output.info("no jobs" + ("" if all_ or state else " running or waiting (try --all)"))
    return 0


@job_app.command
def status(job_id: str, /, *, json: JsonFlag = False) -> int:
    """Show a job's state, reason, exit code, attempts and members.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    with connect() as api:
        job = get_job(api, job_id)
    if json:
        output.print_json(job)
        return 0
    p = output.out.print
    e = output.escape
    p(f"job        {e(job['id'])}", markup=False)
    p(f"state      {e(job['state'])}", markup=False)
    for key in ("reason", "exit_code"):
        if job.get(key) not in (None, ""):
            p(f"{key.replace('_', ' '):<10} {e(job[key])}", markup=False)
    for key in ("experiment", "method", "owner", "queue", "created_at", "updated_at"):
        p(f"{key.replace('_', ' '):<10} {e(str(job.get(key)))}", markup=False)
    p(f"profile    {e(str(job.get('profile')))} → {e(str(job.get('backend')))}", markup=False)
    p(f"retry      {retry_words(job.get('retry'))}", markup=False)
    if job.get("next_attempt_at"):
        p(f"next       attempt not before {job['next_attempt_at']}", markup=False)
    rows = []
    for a in job.get("attempts") or []:
        state = a.get("state")
        if a.get("end") and a.get("end") not in (state, "cancelled"):
            state = f"{state} ({a['end']})"  # failed (node-lost)
        rows.append(
            (f"#{a.get('number')}", "", "", "", state, a.get("exit_code"), a.get("reason"))
        )  # fmt: skip
        for m in a.get("members") or []:
            rows.append(
                (f"  member {m.get('index')}", m.get("role"), m.get("node"), m.get("handle"),
                 m.get("state"), m.get("exit_code"), m.get("reason"))
            )  # fmt: skip
    if rows:
        output.table(["ATTEMPT", "ROLE", "NODE", "HANDLE", "STATE", "EXIT", "REASON"], rows)
    for a in job.get("attempts") or []:  # attempt 2 resumed from checkpoint-200 (step 200, …)
        for line in (a.get("resume") or {}).get("words") or []:
            p(line, markup=False)
    if job.get("state") == JobState.PENDING.value:
        p(f"see why it waits: tp job why {job['id']}", markup=False)
    return 0


@job_app.command
def events(job_id: str, /, *, json: JsonFlag = False) -> int:
    """Show a job's timeline: its preview and every state transition, with time and reason.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    with connect() as api:
        answer = api.get(job_path(job_id, "/events"), {"limit": 500})
    if json:
        output.print_json(answer)
        return 0
    output.table(
        ["AT", "STAGE", "STATE", "REASON"],
        [(e.get("at"), e.get("stage"), e.get("state") or "", e.get("reason"))
         for e in answer.get("events") or []],
    )  # fmt: skip
    return 0


@job_app.command
def why(job_id: str, /, *, json: JsonFlag = False) -> int:
    """Say why a job waits (quota, capacity, holds for earlier jobs, node states), or what
    it holds.

    Parameters
    ----------
    job_id
        The job id (`tp job ls`).
    """
    with connect() as api:
        answer = api.get(job_path(job_id, "/why"))
    if json:
        output.print_json(answer)
        return 0
    p = output.out.print
    where = ""
    if answer.get("position") is not None:
        where = f" (position {answer['position']} of {answer.get('pending_total')} pending)"
    if answer.get("kind") == "finished":  # the text says how and why it ended
        p(f"job {answer['job_id']} has ended", markup=False)
    else:
        p(f"job {answer['job_id']} is {answer['state']}{where}", markup=False)
    p(answer["text"], markup=False)
    for line in answer.get("checkpoints") or []:
        p(line, markup=False)
    return 0


@job_app.command
def logs(
    job_id: str | None = None,
    /,
    *,
    follow: Annotated[bool, Parameter(name=["--follow", "-f"])] = False,
    member: Annotated[int, Parameter(name=["--member", "-m"])] = 0,
) -> int:
    """Print a job's output (stdout and stderr); with -f keep streaming until it ends.

    Parameters
    ----------
    job_id
        The job id; default: your most recent job.
    follow
        Keep streaming new output until the job ends.
    member
        Which member's output (its index in the latest attempt; default 0). A job that has
        no such member is refused with the members it has.
    """
    if member < 0:
        raise InvalidInput(
            f"--member must be 0 or more, not {member}",
            fix="give a member index: 0 for the first member",
            field="member",
        )
    with connect() as api:
        if job_id is None:
            job_id = latest_job_id(api)
            output.info(f"logs of job {job_id}")
        if follow:  # a job not started yet has no output: say why it waits, never a silent wait
            follow = wait_to_start(api, job_id)["state"] not in FINAL
        stream_logs(api, job_id, follow, member)
    return 0


@job_app.command
def stop(
    job_id: str,
    /,
    *,
    wait: Annotated[bool, Parameter(name="--wait")] = False,
) -> int:
    """Ask a job to stop; with --wait, wait until every member is known stopped.

    A job that has already ended is not stopped again: one that was cancelled says so (exit
    code 0: stopping is idempotent), one that succeeded or failed is refused (exit code 4)
    with how it ended.

    Parameters
    ----------
    job_id
        The job id.
    wait
        Wait until the job reaches a final state.
    """
    with connect() as api:
        before = get_job(api, job_id)
        if before["state"] not in FINAL:
            _, job = api.post(job_path(job_id, "/cancel"))
            before = job if job["state"] in FINAL - {JobState.CANCELLED.value} else before
        if before["state"] in FINAL:  # it had ended before the stop (or while it was sent)
            return _already_ended(before)
        output.out.print(f"stop requested for job {job_id} (state: {job['state']})", markup=False)
        if wait:
            job = wait_while(api, job_id, ACTIVE_VALUES, "stopping")
            output.out.print(describe_end(job), markup=False)
    return 0


def _already_ended(job: dict[str, Any]) -> int:
    if job["state"] == JobState.CANCELLED.value:
        output.out.print(f"{describe_end(job)}: already stopped", markup=False)
        return errors.OK
    raise Conflict(
        f"{describe_end(job)}; it has already ended, there is nothing to stop",
        fix=f"see how it ended with `tp job why {job['id']}`",
    )


lazy(
    job_app,
    "metrics",
    "job_metrics:metrics",
    "Print a job's latest metric values with a sparkline of each curve.",
)
