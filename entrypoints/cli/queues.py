"""`tp queue ls|add|set`: teams' queues, their priorities, quotas and what they hold now."""

from __future__ import annotations

from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.admin import JsonFlag, send
from entrypoints.cli.client import connect, seg

queue_app = App(name="queue", help="Queues: priorities and quotas of each team's jobs.")
NO_CAP = ("none", "unlimited")
QuotaOpt = Annotated[str | None, Parameter(help="a number, or `none` for no cap")]


def quota(value: str | None, flag: str) -> int | None:
    """``"16"`` → 16; ``"none"`` → None (no cap); anything else is refused naming ``flag``."""
    if value is None or value.strip().lower() in NO_CAP:
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidInput(
            f"{flag} {value!r} is not a quota", fix=f"give {flag} N (0 or more) or `none`",
            field=flag,
        )  # fmt: skip
    return n


def attempts(value: str | None) -> int | None:
    """``--max-attempts``: 1 or more, or ``none``."""
    n = quota(value, "--max-attempts")
    if n == 0:
        raise InvalidInput(
            "--max-attempts 0 would let no job run",
            fix="give --max-attempts 1 (no retry) or more, or `none`",
            field="--max-attempts",
        )
    return n


def _used(used: Any, cap: Any) -> str:
    return f"{used or 0}/{'-' if cap is None else cap}"


def _line(q: dict[str, Any]) -> str:
    return (
        f"queue {q.get('name')} (team {q.get('team')}): priority {q.get('priority')}, "
        f"GPU quota {q.get('gpu_quota') if q.get('gpu_quota') is not None else 'none'}, "
        f"job quota {q.get('job_quota') if q.get('job_quota') is not None else 'none'}, "
        f"attempts {q.get('max_attempts') if q.get('max_attempts') is not None else 'no cap'}"
    )


@queue_app.command(name="ls")
def ls(*, json: JsonFlag = False) -> int:
    """List queues: team, priority (higher first), and GPUs and jobs held now against the
    quotas (`-`: no cap)."""
    with connect() as api:
        queues = api.get("/v1/queues")
    if json:
        output.print_json(queues)
        return 0
    output.table(
        ["QUEUE", "TEAM", "PRIORITY", "GPUS USED/QUOTA", "JOBS USED/QUOTA", "MAX ATTEMPTS"],
        [
            (q.get("name"), q.get("team"), q.get("priority"),
             _used(q.get("gpus_in_use"), q.get("gpu_quota")),
             _used(q.get("jobs_in_use"), q.get("job_quota")),
             "-" if q.get("max_attempts") is None else q.get("max_attempts"))
            for q in queues
        ],
    )  # fmt: skip
    return 0


@queue_app.command(name="add")
def add(
    name: str,
    /,
    *,
    team: Annotated[str, Parameter(name="--team")],
    priority: Annotated[int, Parameter(name="--priority")] = 0,
    gpu_quota: Annotated[QuotaOpt, Parameter(name="--gpu-quota")] = None,
    job_quota: Annotated[QuotaOpt, Parameter(name="--job-quota")] = None,
    max_attempts: Annotated[QuotaOpt, Parameter(name="--max-attempts")] = None,
) -> int:
    """Create a queue of a team (admins and operators). Its team's members may submit to it.

    Parameters
    ----------
    name
        The queue's name (`tp submit --queue NAME`).
    team
        The team that owns it.
    priority
        -1000 to 1000; higher is served first, FIFO within a priority.
    gpu_quota
        At most this many GPUs held by its jobs at once (default: no cap).
    job_quota
        At most this many of its jobs holding resources at once (0 closes the queue).
    max_attempts
        At most this many attempts per job, whatever its retry policy asks (1: no retry).
    """
    body = {"name": name, "team": team, "priority": priority,
            "gpu_quota": quota(gpu_quota, "--gpu-quota"),
            "job_quota": quota(job_quota, "--job-quota"),
            "max_attempts": attempts(max_attempts)}  # fmt: skip
    with connect() as api:
        _, q = api.post("/v1/queues", body)
    output.out.print("created " + _line(q), markup=False)
    return 0


@queue_app.command(name="set")
def set_(
    name: str,
    /,
    *,
    team: Annotated[str | None, Parameter(name="--team")] = None,
    priority: Annotated[int | None, Parameter(name="--priority")] = None,
    gpu_quota: Annotated[QuotaOpt, Parameter(name="--gpu-quota")] = None,
    job_quota: Annotated[QuotaOpt, Parameter(name="--job-quota")] = None,
    max_attempts: Annotated[QuotaOpt, Parameter(name="--max-attempts")] = None,
) -> int:
    """Change a queue (admins and operators). Jobs holding resources keep them; new quotas
    apply to the next admissions.

    Parameters
    ----------
    team
        Move the queue to another team.
    priority
        The new priority (-1000 to 1000).
    gpu_quota
        The new GPU quota, or `none` to remove the cap.
    job_quota
        The new job quota, or `none` to remove the cap.
    max_attempts
        The new cap on attempts per job (for later submissions), or `none` to remove it.
    """
    body: dict[str, Any] = {}
    if team is not None:
        body["team"] = team
    if priority is not None:
        body["priority"] = priority
    if gpu_quota is not None:
        body["gpu_quota"] = quota(gpu_quota, "--gpu-quota")
    if job_quota is not None:
        body["job_quota"] = quota(job_quota, "--job-quota")
    if max_attempts is not None:
        body["max_attempts"] = attempts(max_attempts)
    if not body:
        raise InvalidInput("nothing to change", fix="give at least one option (see --help)")
    with connect() as api:
        q = send(api, "PATCH", f"/v1/queues/{seg(name)}", body)
    output.out.print(_line(q), markup=False)
    return 0
