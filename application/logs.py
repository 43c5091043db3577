"""Streaming a job's output: the stored final log, or the live one from the backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from application.context import Context
from application.jobs import get_job
from domain.auth import Principal
from domain.errors import InvalidInput, NotFound
from domain.lifecycle import JOB_FINAL


async def stream_logs(
    ctx: Context,
    principal: Principal,
    job_id: str,
    *,
    follow: bool,
    member: int = 0,
    poll_seconds: float = 0.5,
) -> AsyncIterator[bytes]:
    """Yield the output of ``member`` of the job's latest attempt.

    Without ``follow``: what exists now. With ``follow``: waits for the member to start, then
    streams until it exits. Checks visibility before yielding anything, so a caller may begin
    its response only after the first chunk.
    """
    details = await get_job(ctx, principal, job_id)
    if member < 0 or member >= details.job.spec.members:
        raise InvalidInput(
            f"job {job_id} has no member {member}",
            fix=f"choose a member index from 0 to {details.job.spec.members - 1}",
            field="member",
        )
    return _stream(ctx, principal, job_id, follow, member, poll_seconds)


async def _stream(
    ctx: Context, principal: Principal, job_id: str, follow: bool, member: int, poll: float
) -> AsyncIterator[bytes]:
    while True:
        details = await get_job(ctx, principal, job_id)
        final = details.job.state in JOB_FINAL
        if details.attempts:
            latest = details.attempts[-1]
            async with ctx.uow() as uow:
                stored = await uow.logs.get(latest.attempt.id)
            if stored is not None:
                data, truncated = stored
                if truncated:
                    yield b"[tuneplane: earlier output was truncated]\n"
                yield data
                return
            handle = next((m.handle for m in latest.members if m.index == member), None)
            if handle is not None:
                backend = ctx.backend(details.job.spec.backend)
                try:
                    async for chunk in backend.logs(handle, follow=follow):
                        yield chunk
                    return
                except NotFound:
                    if final:
                        return  # released and nothing stored: there is nothing to show
                    # released meanwhile: the stored copy is written in the same step
        if not follow or final:
            return
        await asyncio.sleep(poll)
