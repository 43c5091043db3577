"""What the supervisor does at the edges of a member's life, beside following it: adopt the
handles a backend holds although none was recorded, fail an attempt that cannot go on (stop
first, record after: never stopped on a guess), read a stopped member's log, and the placement
a member was given."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from application.context import Context
from application.supervisor_chores import log_moved, retry_or_end
from domain.admission import Assignment
from domain.backend_ports import ExecutionBackend
from domain.errors import TunePlaneError, Unavailable
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, AttemptState, JobState, MemberState
from domain.retry import LAUNCH_FAILED
from domain.unit_of_work import FleetUnit

log = logging.getLogger("tuneplane.supervisor")


async def fail_attempt(
    ctx: Context,
    backend: ExecutionBackend,
    job: Job,
    attempt: Attempt,
    reason: str,
    due: Callable[[Job], None],
) -> None:
    """The attempt cannot go on: stop what was launched, then record every member failed
    and release the reservation. If a stop cannot be confirmed, nothing is recorded and
    the next tick tries again (a member is never recorded stopped on a guess)."""
    async with ctx.units.jobs() as uow:
        members = await uow.members.for_attempt(attempt.id)
    adopted = await adopt_held(ctx, backend, members)
    if adopted is None:
        return
    launched = [m for m in adopted if m.handle is not None and m.state not in MEMBER_FINAL]
    for m in launched:
        assert m.handle is not None
        try:
            await backend.stop(m.handle, ctx.limits.stop_grace_seconds)
        except Unavailable as exc:
            log.warning("cannot stop %s after a failed launch: %s", m.id, exc)
            return
    now = ctx.clock.now()
    async with ctx.units.placement() as uow:
        for m in await uow.members.for_attempt(attempt.id):
            if m.state not in MEMBER_FINAL:
                await uow.members.update(m.moved(MemberState.FAILED, now, reason), m.state)
        current = await uow.attempts.get(attempt.id)
        if current is not None and current.state not in ATTEMPT_FINAL:
            current_now = current.moved(AttemptState.FAILED, now, reason, cause=LAUNCH_FAILED)
            await uow.attempts.update(current_now, current.state)
            current = current_now
        ended = job.moved(JobState.FAILED, now, reason)
        if current is not None:
            ended = await retry_or_end(uow, job, ended, current, now)
            due(ended)
        await uow.jobs.update(ended, job.state)
        await uow.reservations.release(attempt.id)
        await uow.commit()
    log_moved(job, ended)
    for m in launched:
        if m.handle is not None:
            with contextlib.suppress(TunePlaneError):
                await backend.release(m.handle)


async def adopt_held(
    ctx: Context, backend: ExecutionBackend, members: list[Member]
) -> list[Member] | None:
    """Record the handles of pending members that the backend holds although no handle was
    recorded (a supervisor died between launching them and recording it), so that they are
    stopped and observed like the others instead of being recorded stopped on a guess.
    Returns the members as they are now, or None when the backend cannot say."""
    if not any(m.handle is None and m.state is MemberState.PENDING for m in members):
        return members
    try:
        held = await backend.held()
    except Unavailable as exc:
        log.warning("cannot list the members %s holds: %s", backend.name, exc)
        return None
    now = ctx.clock.now()
    adopted = {
        m.id: m.moved(MemberState.STARTING, now, handle=held[m.id])
        for m in members
        if m.handle is None and m.state is MemberState.PENDING and m.id in held
    }
    if adopted:
        async with ctx.units.jobs() as uow:
            for new in adopted.values():
                await uow.members.update(new, MemberState.PENDING)
            await uow.commit()
    return [adopted.get(m.id, m) for m in members]


async def collect_logs(ctx: Context, backend: ExecutionBackend, handle: str) -> bytes:
    """A stopped member's log, its last ``max_log_bytes`` kept; a failure to read it is said
    in the log itself."""
    limit = ctx.limits.max_log_bytes
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in backend.logs(handle, follow=False):
            chunks.append(chunk)
            size += len(chunk)
            while size - len(chunks[0]) > limit:  # keep roughly the last `limit` bytes
                size -= len(chunks.pop(0))
    except TunePlaneError as exc:
        chunks.append(f"\n[tuneplane: log collection failed: {exc}]\n".encode())
    return b"".join(chunks)


async def assignments(uow: FleetUnit, attempt_id: str) -> dict[int, Assignment]:
    reservation = await uow.reservations.get(attempt_id)
    return {a.member: a for a in reservation.assignments} if reservation else {}
