"""Explicit, fenced decisions about work the control plane cannot see: an operator declares a
node lost, or releases one attempt's reservation. Never a side effect of a socket error.

Declaring a node lost fences it (connectivity ``lost``: the scheduler places nothing there) and
records its unfinished members as failed; the supervisor then stops the rest of each gang and
releases the reservation once every member is known stopped. Releasing a reservation by hand
records every unfinished member of the attempt as failed with the operator's reason, ends the
attempt and job, and frees the capacity, all in one transaction.
"""

from __future__ import annotations

from datetime import datetime

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from application.context import Context
from domain.auth import Principal, Role
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.fleet import Connectivity, SchedState
from domain.jobs import Job
from domain.lifecycle import (
    ATTEMPT_FINAL,
    JOB_FINAL,
    MEMBER_FINAL,
    AttemptState,
    JobState,
    MemberState,
)
from domain.retry import NODE_LOST
from domain.unit_of_work import JobsUnit


def _require_operator(principal: Principal, what: str) -> None:
    if principal.role not in (Role.ADMIN, Role.OPERATOR):
        raise Forbidden(
            f"user {principal.name} has role {principal.role}, which may not {what}",
            fix="ask an operator or an admin",
        )


def _check_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason or len(reason) > 500:
        raise InvalidInput(
            "a reason of 1-500 characters is required",
            fix="say why, e.g. --reason 'host powered off, confirmed by the datacenter'",
            field="reason",
        )
    return reason


async def declare_node_lost(ctx: Context, principal: Principal, node: str, reason: str) -> int:
    """Fence ``node`` and fail its unfinished members. Returns how many members were failed.
    Idempotent."""
    _require_operator(principal, "declare a node lost")
    reason = _check_reason(reason)
    async with ctx.units.fleet() as uow:
        if await uow.fleet.node(node) is None:
            raise NotFound(f"node {node} does not exist", fix="see `tp fleet ls`", field="node")
    return await fence_node(ctx, node, f"node {node} declared lost by {principal.name}: {reason}")


async def fence_node(ctx: Context, node: str, text: str) -> int:
    """Declare ``node`` lost: cordon it, raise its fencing epoch (its daemon's later messages
    about older members are refused, and it forgets them when it reconnects) and record its
    unfinished members failed. Returns how many members were failed.

    One transaction, tried again when it loses a race with a concurrent change of one of those
    members (the supervisor recording a report): the operator's decision is never refused for
    work the platform did meanwhile (found by the API fuzz test: a 409)."""
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(Conflict), stop=stop_after_attempt(FENCE_TRIES), reraise=True
    ):
        with attempt:
            return await _fence_once(ctx, node, text)
    raise AssertionError("unreachable: the last try's Conflict is raised")  # pragma: no cover


FENCE_TRIES = 5


async def _fence_once(ctx: Context, node: str, text: str) -> int:
    now = ctx.clock.now()
    failed = 0
    async with ctx.units.gang() as uow:
        current = await uow.fleet.node(node)
        if current is None or current.connectivity is Connectivity.LOST:
            return 0
        await uow.fleet.set_node_state(node, SchedState.CORDONED, Connectivity.LOST, now)
        await uow.links.fence(node)
        for r in await uow.reservations.live():
            if not any(a.node == node for a in r.assignments):
                continue
            attempt = await uow.attempts.get(r.attempt_id)
            if attempt is not None and attempt.state not in ATTEMPT_FINAL:
                lost = attempt.caused(NODE_LOST, now)  # for its job's retry policy
                if lost is not attempt:
                    await uow.attempts.update(lost, attempt.state)
            for m in await uow.members.for_attempt(r.attempt_id):
                if m.node == node and m.state not in MEMBER_FINAL:
                    await uow.members.update(m.moved(MemberState.FAILED, now, text), m.state)
                    failed += 1
        await uow.commit()
    return failed


async def release_reservation(
    ctx: Context, principal: Principal, attempt_id: str, reason: str
) -> bool:
    """Release one attempt's reservation after the operator confirmed its members stopped.
    Returns False when nothing was held (idempotent)."""
    _require_operator(principal, "release a reservation")
    reason = _check_reason(reason)
    now = ctx.clock.now()
    text = f"reservation released by {principal.name}: {reason}"
    async with ctx.units.placement() as uow:
        attempt = await uow.attempts.get(attempt_id)
        if attempt is None:
            raise NotFound(
                f"no attempt {attempt_id}", fix="see `tp job status ID`", field="attempt_id"
            )
        for m in await uow.members.for_attempt(attempt_id):
            if m.state not in MEMBER_FINAL:
                await uow.members.update(m.moved(MemberState.FAILED, now, text), m.state)
        if attempt.state not in ATTEMPT_FINAL:
            await uow.attempts.update(attempt.moved(AttemptState.FAILED, now, text), attempt.state)
        job = await uow.jobs.get(attempt.job_id)
        if job is not None:
            await _end_job(uow, job, text, now)
        released = await uow.reservations.release(attempt_id)
        await uow.commit()
    return released


async def _end_job(uow: JobsUnit, job: Job, text: str, now: datetime) -> None:
    if job.state in JOB_FINAL:
        return
    target = JobState.CANCELLED if job.state is JobState.STOPPING else JobState.FAILED
    await uow.jobs.update(job.moved(target, now, text), job.state)
