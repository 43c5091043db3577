"""What the supervisor and the gang coordinator share beside launching and following members:
the retry decision read against a job's attempts, and the sweep of members a backend still
holds although they are recorded finished."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from application.context import Context
from domain.errors import TunePlaneError, Unavailable
from domain.jobs import Attempt, Job
from domain.lifecycle import MEMBER_FINAL
from domain.progress import retried
from domain.unit_of_work import JobsUnit

log = logging.getLogger("tuneplane.supervisor")


def log_moved(job: Job, now: Job) -> None:
    """One INFO line per change of a job's state, wherever it is made (the supervisor, the gang
    coordinator); its id is bound (docs/operations.md#logs)."""
    if now.state is not job.state:
        why = f": {now.reason}" if now.reason else ""
        log.info("job %s now %s (was %s)%s", job.id, now.state, job.state, why)


async def retry_or_end(uow: JobsUnit, job: Job, ended: Job, attempt: Attempt, now: datetime) -> Job:
    """``ended``, or the job pending again when its retry policy starts another attempt
    (``attempt``: the one that ended, as it is now written in this transaction)."""
    attempts = [attempt if a.id == attempt.id else a for a in await uow.attempts.for_job(job.id)]
    return retried(job, ended, attempts, now)


async def release_finished(ctx: Context, unreachable: set[str] | None = None) -> int:
    """Release members the backends still hold although they are recorded as finished (a
    supervisor died between recording the exit and releasing). Members the database does not
    know are left alone: they may belong to another control plane. Returns how many were
    released. Coordinated backends are not swept: their nodes forget finished members
    themselves (told by the gateway).

    ``unreachable`` (the caller's, kept between sweeps) names the backends whose last sweep was
    skipped: a backend that stays unreachable (e.g. no container engine on a host whose members
    run as processes) is warned about once, then at DEBUG, and its return is said."""
    released = 0
    unreachable = set() if unreachable is None else unreachable
    for backend in ctx.backends.values():
        try:
            held = await backend.held()
        except Unavailable as exc:
            first = backend.name not in unreachable
            unreachable.add(backend.name)
            level = logging.WARNING if first else logging.DEBUG
            log.log(level, "sweep of %s skipped: %s", backend.name, exc)
            continue
        if backend.name in unreachable:
            unreachable.discard(backend.name)
            log.warning("sweep of %s: the backend answers again", backend.name)
        async with ctx.units.jobs() as uow:
            finished = [
                handle
                for member_id, handle in held.items()
                if (m := await uow.members.get(member_id)) is not None and m.state in MEMBER_FINAL
            ]
        for handle in finished:
            with contextlib.suppress(TunePlaneError):
                await backend.release(handle)
                released += 1
    if released:
        log.info("sweep released %d finished members", released)
    return released
