"""Streaming a job's output: the stored final log, or the live one from the backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from application.context import Context
from application.jobs import get_job
from domain.auth import Principal
from domain.errors import NotFound
from domain.lifecycle import JOB_FINAL, MEMBER_FINAL


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
    if details.attempts:  # the members that exist: the latest attempt's
        indexes = [m.index for m in details.attempts[-1].members]
    else:
        indexes = list(range(details.job.spec.members))
    if member not in indexes:
        raise NotFound(
            f"job {job_id} has no member {member}: its members are {_listed(indexes)}",
            fix=f"ask for one of its members (member={indexes[0] if indexes else 0})",
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
            async with ctx.units.jobs() as uow:
                stored = await uow.logs.get(latest.attempt.id, member)
            if stored is not None:
                data, truncated = stored
                if truncated:
                    yield b"[tuneplane: earlier output was truncated]\n"
                yield data
                return
            handle = next((m.handle for m in latest.members if m.index == member), None)
            backend = ctx.direct(details.job.spec.backend)
            if handle is not None and backend is None:  # coordinated: the gateway stores it
                member_id = next(m.id for m in latest.members if m.index == member)
                async for chunk in _live(ctx, member_id, follow, poll):
                    yield chunk
                return
            if handle is not None and backend is not None:
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


def _listed(indexes: list[int]) -> str:
    if len(indexes) > 1 and indexes == list(range(indexes[0], indexes[-1] + 1)):
        return f"{indexes[0]} to {indexes[-1]}"
    return ", ".join(str(i) for i in indexes) or "none"


def stitch(pieces: list[tuple[int, bytes]], position: int = 0) -> tuple[bytes, int]:
    """Live pieces (offset, bytes) in offset order, which may overlap or leave gaps, as one
    text from ``position`` on; returns it and the position after it."""
    out = bytearray()
    for offset, data in pieces:
        if offset > position:
            out += f"\n[tuneplane: {offset - position} bytes of output missing]\n".encode()
            position = offset
        fresh = data[position - offset :]
        out += fresh
        position += len(fresh)
    return bytes(out), position


async def _live(ctx: Context, member_id: str, follow: bool, poll: float) -> AsyncIterator[bytes]:
    """A node-backend member's output from its live log (pieces at offsets, stored by the
    gateway), until the member is final (with ``follow``)."""
    position = 0
    while True:
        async with ctx.units.jobs() as uow:
            pieces = await uow.logs.live(member_id, position)
            current = await uow.members.get(member_id)
        text, position = stitch(pieces, position)
        if text:
            yield text
        if not follow or current is None:
            return
        if current.state in MEMBER_FINAL:
            follow = False  # one more read for pieces stored just before the end
        await asyncio.sleep(poll)
