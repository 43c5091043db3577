"""A started member's output, sent to the gateway while it runs (``tp job logs --follow``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from domain.errors import NotFound, TunePlaneError
from domain.node_daemon_ports import MemberRuntime
from domain.node_messages import LogChunk
from domain.node_protocol import MemberRef

log = logging.getLogger("tuneplane.node")

LOG_CHUNK = 1024 * 1024  # the most output one LogChunk carries


async def ship_live_output(
    runtime: MemberRuntime,
    ref: MemberRef,
    cid: str,
    say: Callable[[LogChunk], Awaitable[None]],
    limit: int,
    flush_seconds: float,
) -> None:
    """Send the output in pieces at byte offsets, at most every ``flush_seconds`` and at most
    ``limit`` bytes: one reader gathers, this task ships. Pieces sent while disconnected are
    lost and sent again on the next Welcome (the store keeps the first copy of each)."""
    buf = bytearray()
    done = asyncio.Event()

    async def read() -> None:
        try:
            async for chunk in runtime.follow_logs(cid):
                buf.extend(chunk)
        except Exception as exc:  # the engine or the container went away: stop following
            log.debug("following the output of %s ended: %s", ref.member_id, exc)
        finally:
            done.set()

    reader = asyncio.create_task(read())
    offset = 0
    try:
        while offset < limit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), flush_seconds)
            while buf and offset < limit:
                piece = bytes(buf[:LOG_CHUNK])
                del buf[: len(piece)]
                await say(LogChunk(ref, piece, False, live=True, offset=offset))
                offset += len(piece)
            if done.is_set() and not buf:
                return
    finally:
        reader.cancel()


async def ship_final_log(
    runtime: MemberRuntime,
    ref: MemberRef,
    cid: str | None,
    say: Callable[[LogChunk], Awaitable[None]],
    limit: int,
) -> None:
    """Send the last ``limit`` bytes of an ended member's output, in pieces (the last marked),
    or, when the engine cannot give it, a line that says why (the log is never waited for)."""
    try:
        if cid is None:
            raise NotFound("its container is not known to this node")
        data, truncated = await runtime.final_log(cid, limit)
    except TunePlaneError as exc:
        data, truncated = f"[tuneplane: log collection failed: {exc}]\n".encode(), False
    chunks = [data[i : i + LOG_CHUNK] for i in range(0, len(data), LOG_CHUNK)] or [b""]
    for i, chunk in enumerate(chunks):
        await say(LogChunk(ref, chunk, i == len(chunks) - 1, truncated))
