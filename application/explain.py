"""`tp job why ID`: why a job waits, or what it holds, in words a user can act on.

A pending job's explanation comes from running ``admission.decide`` over a fresh snapshot — the
same function the scheduler runs — so the text always matches what the scheduler would do now.
"""

from __future__ import annotations

from dataclasses import dataclass

from application.context import Context
from application.jobs import get_job
from domain.admission import decide
from domain.auth import Principal
from domain.lifecycle import JOB_FINAL, MEMBER_FINAL, JobState

WHY_SNAPSHOT_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    state: str
    kind: str  # a WaitKind value for a waiting job; "reserved", "finished" or "stopping"
    text: str
    position: int | None = None  # rank among pending jobs, for a waiting job
    pending_total: int | None = None


async def explain_job(ctx: Context, principal: Principal, job_id: str) -> Explanation:
    details = await get_job(ctx, principal, job_id)
    job = details.job
    if job.state is JobState.PENDING:
        async with ctx.uow() as uow:
            snapshot = await uow.scheduling.snapshot(WHY_SNAPSHOT_LIMIT)
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
    async with ctx.uow() as uow:
        held = await uow.reservations.get(attempt.attempt.id) if attempt else None
    if job.state in JOB_FINAL and held is None:
        text = f"finished: {job.state}" + (f" ({job.reason})" if job.reason else "")
        return Explanation(job.id, job.state, "finished", text)
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
    return Explanation(job.id, job.state, "reserved", text)
