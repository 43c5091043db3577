"""Reading and cancelling jobs."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from application.context import Context
from domain.auth import Principal
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.jobs import SEARCH_MAX, Attempt, Job, JobEvent, JobProgress, Member
from domain.lifecycle import JOB_FINAL, AttemptState, JobState
from domain.node_ports import LaunchPlan, MemberLaunch
from domain.node_protocol import Decision
from domain.ports import JobPage
from domain.unit_of_work import JobsUnit


@dataclass(frozen=True, slots=True)
class AttemptDetails:
    attempt: Attempt
    members: list[Member]


@dataclass(frozen=True, slots=True)
class JobDetails:
    job: Job
    attempts: list[AttemptDetails]


@dataclass(frozen=True, slots=True)
class Stage:
    """One line of a job's timeline: ``stage`` names the step, ``state`` the job state entered
    (None for ``previewed``, which precedes the job)."""

    stage: str
    at: datetime
    state: JobState | None
    reason: str


# The step each job state stands for (docs/http-api.md, "Job events"): the scheduler's
# admission reserves the whole envelope and moves the job to starting in one transaction.
_STAGES = {
    JobState.PENDING: "committed",  # queued for admission
    JobState.STARTING: "admitted",  # reserved; members being prepared and launched
    JobState.RUNNING: "running",
    JobState.STOPPING: "stopping",
    JobState.SUCCEEDED: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}


def _stage(event: JobEvent) -> Stage:
    name = _STAGES[event.state]
    if event.state is JobState.PENDING and event.seq > 1:
        name = "requeued"  # a gang launch aborted before anything started
    return Stage(name, event.at, event.state, event.reason)


def _visible(job: Job | None, principal: Principal, job_id: str) -> Job:
    if job is None or (job.owner != principal.name and not principal.sees_all_jobs):
        raise NotFound(f"no job {job_id}", fix="list your jobs with `tp job ls`", field="job_id")
    return job


async def _details(uow: JobsUnit, job: Job) -> JobDetails:
    attempts = await uow.attempts.for_job(job.id)
    return JobDetails(
        job, [AttemptDetails(a, await uow.members.for_attempt(a.id)) for a in attempts]
    )


async def get_job(ctx: Context, principal: Principal, job_id: str) -> JobDetails:
    async with ctx.units.jobs() as uow:
        job = _visible(await uow.jobs.get(job_id), principal, job_id)
        return await _details(uow, job)


async def job_timeline(ctx: Context, principal: Principal, job_id: str, limit: int) -> list[Stage]:
    """The job's steps, oldest first: its preview, then every recorded state transition."""
    if not 1 <= limit <= ctx.limits.list_limit_max:
        raise InvalidInput(
            f"limit {limit} is out of range",
            fix=f"ask for 1 to {ctx.limits.list_limit_max} events",
            field="limit",
        )
    async with ctx.units.job_nodes() as uow:
        job = _visible(await uow.jobs.get(job_id), principal, job_id)
        preview = await uow.previews.get(job.preview_id)
        events = await uow.jobs.events(job.id, limit)
        launches = []
        for attempt in await uow.attempts.for_job(job.id):
            plan = await uow.launches.plan(attempt.id)
            if plan is not None:
                launches += _launch_stages(
                    attempt.number, plan, await uow.launches.members(plan.attempt_id)
                )
    first = [Stage("previewed", preview.created_at, None, "")] if preview is not None else []
    stages = first + [_stage(e) for e in events]
    return sorted(stages + launches, key=lambda s: s.at)[:limit]  # stable: ties keep order


def _launch_stages(number: int, plan: LaunchPlan, members: list[MemberLaunch]) -> list[Stage]:
    """A two-phase gang launch's own steps (node backend): every member ``prepared`` on its
    node (voted yes), then the decision, ``launch committed`` or ``launch aborted``."""
    out = []
    votes = [m.voted_at for m in members if m.vote and m.voted_at is not None]
    if members and len(votes) == len(members):
        nodes = ", ".join(sorted({m.node for m in members}))
        why = f"attempt {number}: {len(members)} member(s) prepared on {nodes}"
        out.append(Stage("prepared", max(votes), None, why))
    if plan.decision is not None and plan.decided_at is not None:
        name = "launch committed" if plan.decision is Decision.COMMIT else "launch aborted"
        out.append(
            Stage(name, plan.decided_at, None, f"attempt {number}: {plan.reason}".rstrip(": "))
        )
    return out


async def list_jobs(
    ctx: Context,
    principal: Principal,
    *,
    states: Collection[JobState] | None,
    limit: int,
    cursor: str | None,
    everyone: bool,
    owner: str | None = None,
    queue: str | None = None,
    search: str | None = None,
) -> JobPage:
    """``owner`` names whose jobs (only someone who sees every job may name another user;
    otherwise the caller's own); ``everyone`` lists every user's (for those who may);
    ``search`` keeps the jobs whose experiment, id or owner holds that text (literally)."""
    search = _search(search)
    if not 1 <= limit <= ctx.limits.list_limit_max:
        raise InvalidInput(
            f"limit {limit} is out of range",
            fix=f"ask for 1 to {ctx.limits.list_limit_max} jobs per page and follow next_cursor",
            field="limit",
        )
    if owner is not None and owner != principal.name and not principal.sees_all_jobs:
        raise Forbidden(
            f"{principal.name} may not list the jobs of {owner}",
            fix="leave out owner= (your own jobs), or ask an operator",
        )
    if owner is None:
        owner = None if everyone and principal.sees_all_jobs else principal.name
    async with ctx.units.jobs() as uow:
        return await uow.jobs.list(
            owner=owner, states=states, limit=limit, cursor=cursor, queue=queue, search=search
        )


def _search(text: str | None) -> str | None:
    """A list's search text, checked: at most SEARCH_MAX characters, no NUL or other control
    character; surrounding spaces dropped; empty means no search."""
    if text is None or not text.strip():
        return None
    if len(text) > SEARCH_MAX:
        raise InvalidInput(
            f"the search text is {len(text)} characters long",
            fix=f"search for at most {SEARCH_MAX} characters (part of an experiment, id or owner)",
            field="q",
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InvalidInput(
            "the search text holds a control character (such as NUL or a line break)",
            fix="search for printable text only",
            field="q",
        )
    return text.strip()


async def progress(ctx: Context, page: Collection[Job]) -> dict[str, JobProgress]:
    """The attempts and start/pending times of a page of jobs, in one bounded read."""
    if not page:
        return {}
    async with ctx.units.jobs() as uow:
        return await uow.jobs.progress([j.id for j in page])


async def cancel_job(ctx: Context, principal: Principal, job_id: str) -> JobDetails:
    """Ask a job to stop. Idempotent: cancelling a stopping or finished job changes nothing.

    A pending job is cancelled at once; a starting or running one moves to ``stopping`` and the
    supervisor stops its members; it becomes ``cancelled`` only once every member is known stopped.
    """
    now = ctx.clock.now()
    async with ctx.units.jobs() as uow:
        job = _visible(await uow.jobs.get(job_id), principal, job_id)
        if job.owner != principal.name and principal.role not in ("admin", "operator"):
            raise Forbidden(
                f"job {job_id} belongs to {job.owner}",
                fix="only its owner, an operator or an admin may stop it",
            )
        if job.state in JOB_FINAL or job.state is JobState.STOPPING:
            return await _details(uow, job)
        if job.state is JobState.PENDING:
            moved = job.moved(JobState.CANCELLED, now, reason="cancelled before it started")
        else:
            moved = job.moved(JobState.STOPPING, now, reason=f"stop requested by {principal.name}")
            for attempt in await uow.attempts.for_job(job.id):
                if attempt.state in (AttemptState.LAUNCHING, AttemptState.RUNNING):
                    await uow.attempts.update(
                        attempt.moved(AttemptState.STOPPING, now, moved.reason), attempt.state
                    )
        try:
            await uow.jobs.update(moved, job.state)
        except Conflict:
            # the supervisor moved it meanwhile; the caller can simply ask again
            raise Conflict(
                f"job {job_id} changed state while being stopped",
                fix=f"run `tp job stop {job_id}` again",
            ) from None
        details = await _details(uow, moved)
        await uow.commit()
    return details
