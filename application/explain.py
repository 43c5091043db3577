"""`tp job why ID`: why a job waits, or what it holds, in words a user can act on.

A pending job's explanation comes from running ``admission.decide`` over a fresh snapshot — the
same function the scheduler runs — so the text always matches what the scheduler would do now.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from application.context import Context
from application.jobs import JobDetails, get_job
from application.submissions import get_preview
from domain.admission import PendingJob, Snapshot, decide, queue_order
from domain.auth import Principal
from domain.jobs import Member
from domain.lifecycle import JOB_FINAL, MEMBER_FINAL, JobState, MemberState

WHY_SNAPSHOT_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    state: str
    kind: str  # a WaitKind value for a waiting job; "reserved", "finished" or "stopping"
    text: str
    position: int | None = None  # rank among pending jobs, for a waiting job
    pending_total: int | None = None
    # what each attempt resumed from, and the checkpoints skipped (docs/checkpoints.md)
    checkpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    role: str
    request: str  # e.g. "2×8 h200 GPUs in pool a"
    pool: str
    fleet: str | None  # None: the pool is gone from the fleet
    backend: str | None


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    """What would happen to a preview committed now: the same ``admission.decide`` as
    ``explain_job``, over a fresh snapshot with the preview added as the newest pending job."""

    preview_id: str
    starts_now: bool
    kind: str  # "placing" when it would start at once, else a WaitKind value
    text: str
    position: int  # 1-based, among the pending jobs with it added
    pending_total: int  # pending jobs with it added
    ahead: int  # pending jobs before it in queue order
    placements: list[Placement]


def _where(snapshot: Snapshot, role_pool: str) -> tuple[str | None, str | None]:
    pool = snapshot.pools.get(role_pool)
    return (pool.fleet, pool.backend) if pool else (None, None)


async def estimate_wait(ctx: Context, principal: Principal, preview_id: str) -> WaitEstimate:
    """The estimated wait of a preview, as a queue position and the reason it would wait.

    Not a duration: the control plane does not know how long the jobs ahead will run. A preview
    that would start at once says so; one that would wait gives how many pending jobs precede it
    in queue order (priority, then commit time) and the same text `tp job why` would show."""
    preview = await get_preview(ctx, principal, preview_id)
    async with ctx.units.admission() as uow:
        snapshot = await uow.scheduling.snapshot(WHY_SNAPSHOT_LIMIT, ctx.clock.now())
    spec = preview.spec
    candidate = PendingJob(preview.id, spec.queue, ctx.clock.now(), spec.roles)
    pending = [*snapshot.pending, candidate]
    decisions = decide(Snapshot(snapshot.pools, snapshot.nodes, snapshot.queues, pending))
    placements = [
        Placement(r.name, r.describe(), r.pool, *_where(snapshot, r.pool)) for r in spec.roles
    ]
    total = len(pending)
    wait = decisions.waits.get(preview.id)
    if wait is not None:
        return WaitEstimate(
            preview.id, False, wait.kind, wait.text, wait.position, total, wait.position - 1,
            placements,
        )  # fmt: skip
    placed = [p.job_id for p in decisions.placements]
    position = placed.index(preview.id) + 1 if preview.id in placed else total
    text = "would start at once: it fits now, and the scheduler reserves it on its next pass"
    return WaitEstimate(preview.id, True, "placing", text, position, total, 0, placements)


async def explain_job(ctx: Context, principal: Principal, job_id: str) -> Explanation:
    details = await get_job(ctx, principal, job_id)
    said = tuple(
        line
        for a in details.attempts
        if a.attempt.resume is not None
        for line in a.attempt.resume.words(a.attempt.number)
    )
    return replace(await _explain(ctx, details), checkpoints=said)


async def pending_waits(ctx: Context, job_ids: Collection[str]) -> dict[str, str]:
    """Why each of these pending jobs waits (quota, capacity, holds), from one snapshot and
    one admission pass of their own: ``tp job ls`` shows it as the job's reason. Jobs the pass
    would place now say so; jobs it does not see (too far back, or not pending) are left out."""
    if not job_ids:
        return {}
    async with ctx.units.admission() as uow:
        snapshot = await uow.scheduling.snapshot(WHY_SNAPSHOT_LIMIT, ctx.clock.now())
    decisions = decide(snapshot)
    found = {j: w.text for j, w in decisions.waits.items() if j in job_ids}
    for p in decisions.placements:
        if p.job_id in job_ids:
            found[p.job_id] = "fits now: the scheduler reserves it on its next pass"
    return found


@dataclass(frozen=True, slots=True)
class QueuePositions:
    """Where pending jobs stand in queue order (the scheduler's: priority, then FIFO)."""

    positions: dict[str, int]  # job id -> 1-based rank among every pending job
    pending_total: int  # pending jobs the pass saw (at most WHY_SNAPSHOT_LIMIT)


async def queue_positions(ctx: Context, job_ids: Collection[str]) -> QueuePositions | None:
    """The queue positions of these jobs, from one bounded snapshot (the one ``tp job why``
    reads) and no admission pass: a page of a jobs list asks once for all its pending jobs.
    None when none is asked; a job the snapshot does not hold (not pending, or past the
    snapshot's bound) gets no position."""
    if not job_ids:
        return None
    async with ctx.units.admission() as uow:
        snapshot = await uow.scheduling.snapshot(WHY_SNAPSHOT_LIMIT, ctx.clock.now())
    order = queue_order(snapshot.pending, snapshot.queues)
    wanted = set(job_ids)
    found = {j.id: n for n, j in enumerate(order, start=1) if j.id in wanted}
    return QueuePositions(found, len(order))


async def _explain(ctx: Context, details: JobDetails) -> Explanation:
    job = details.job
    now = ctx.clock.now()
    if job.state is JobState.PENDING and job.not_before is not None and job.not_before > now:
        # "attempt 2 failed (node n3 fenced); attempt 3 waits for backoff until 14:05:12"
        return Explanation(job.id, job.state, "backoff", job.reason)
    if job.state is JobState.PENDING:
        async with ctx.units.admission() as uow:
            snapshot = await uow.scheduling.snapshot(WHY_SNAPSHOT_LIMIT, now)
        decisions = decide(snapshot)
        total = len(snapshot.pending)
        wait = decisions.waits.get(job.id)
        if wait is not None:
            return Explanation(job.id, job.state, wait.kind, wait.text, wait.position, total)
        if any(p.job_id == job.id for p in decisions.placements):
            text = "fits now: the scheduler reserves it on its next pass (about a second)"
            return Explanation(job.id, job.state, "placing", text, None, total)
        text = f"more than {WHY_SNAPSHOT_LIMIT} jobs wait ahead of it"
        return Explanation(job.id, job.state, "capacity", text, None, total)
    attempt = details.attempts[-1] if details.attempts else None
    async with ctx.units.fleet() as uow:
        held = await uow.reservations.get(attempt.attempt.id) if attempt else None
    if job.state in JOB_FINAL and held is None:
        return Explanation(job.id, job.state, "finished", _why_ended(details))
    if held is None:
        return Explanation(job.id, job.state, job.state, f"{job.state}, holding no reservation")
    nodes = sorted({a.node for a in held.assignments})
    n = len(held.assignments)
    what = f"{held.gpus} GPU{'s' if held.gpus != 1 else ''}" if held.gpus else "CPUs"
    text = (
        f"holds a reservation of {what} for {n} member{'s' if n != 1 else ''} on "
        f"{', '.join(nodes)} (queue {held.queue})"
    )
    if attempt is not None:
        waiting = [m for m in attempt.members if m.state not in MEMBER_FINAL]
        unknown = [m for m in waiting if m.state == "unknown"]
        if unknown:
            text += (
                f"; member{'s' if len(unknown) != 1 else ''} "
                f"{', '.join(str(m.index) for m in unknown)} "
                f"{'are' if len(unknown) != 1 else 'is'} out of contact, so "
                "the reservation stays held until they are known stopped or an operator "
                "declares their node lost"
            )
        elif job.state in (JobState.STOPPING, *JOB_FINAL):
            text += f"; waiting for {len(waiting)} member(s) to be known stopped"
        text += _waiting_to_start(waiting)
    return Explanation(job.id, job.state, "reserved", text)


def _why_ended(details: JobDetails) -> str:
    """Why an ended job ended, in words: "it succeeded: its member of attempt 1 exited with
    code 0", "it failed: member 1 exited with code 3 (exit code 3)", "it was cancelled: stop
    requested by alice"."""
    job = details.job
    verb = "was cancelled" if job.state is JobState.CANCELLED else job.state.value
    text = f"it {verb}"
    attempt = details.attempts[-1] if details.attempts else None
    if job.state is JobState.SUCCEEDED and attempt is not None:
        n = len(attempt.members)
        who = "its member" if n == 1 else f"every member ({n})"
        text += f": {who} of attempt {attempt.attempt.number} exited with code 0"
    elif job.reason:
        text += f": {job.reason}"
    elif attempt is not None and attempt.attempt.reason:
        text += f": {attempt.attempt.reason}"
    if job.state is not JobState.SUCCEEDED and job.exit_code is not None:
        text += f" (exit code {job.exit_code})"
    if len(details.attempts) > 1:
        text += f"; {len(details.attempts)} attempts ran (`tp job status {job.id}` lists them)"
    if job.state is not JobState.SUCCEEDED:
        text += f"; its output: `tp job logs {job.id}`"
    return text


def _waiting_to_start(members: list[Member]) -> str:
    """What the backend says of members not started yet (Slurm's pending reason, Kueue's
    admission, an image pull), grouped by reason: "; member 0 waits to start: Slurm job 12
    pending: Resources"."""
    by_reason: dict[str, list[int]] = {}
    for m in members:
        if m.state is MemberState.STARTING and m.reason:
            by_reason.setdefault(m.reason, []).append(m.index)
    parts = []
    for reason, indexes in by_reason.items():
        many = len(indexes) != 1
        listed = ", ".join(str(i) for i in indexes)
        parts.append(
            f"; member{'s' if many else ''} {listed} wait{'' if many else 's'} to start: {reason}"
        )
    return "".join(parts)
