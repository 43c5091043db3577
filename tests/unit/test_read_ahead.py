"""ReadAhead (the telemetry gateway's cumulative streams): order, the bound on what is read
ahead, messages put back, the end, and a fault handed over after the messages before it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adapters.grpc.read_ahead import ReadAhead


class Source:
    """Messages 1, 2, … as the test releases them; counts how many were read."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.ready: asyncio.Queue[int | None] = asyncio.Queue()
        self.read = 0
        self.fail_after = fail_after

    async def __aiter__(self) -> AsyncIterator[int]:
        while (m := await self.ready.get()) is not None:
            self.read += 1
            yield m
            if self.fail_after is not None and self.read >= self.fail_after:
                raise ConnectionResetError("the stream was reset")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_takes_what_arrived_in_order_and_stops_reading_at_the_limit() -> None:
    source = Source()
    ahead = ReadAhead(source, limit=3)
    reader = asyncio.create_task(ahead.run())
    try:
        for m in range(1, 7):
            source.ready.put_nowait(m)
        await settle()
        assert source.read == 3  # the rest waits in the stream (flow control holds the sender)
        assert await ahead.take(2) == [1, 2]
        await settle()
        assert source.read == 5
        assert await ahead.take(10) == [3, 4, 5]
        await settle()
        assert await ahead.take(10) == [6]
        waiting = asyncio.create_task(ahead.take(10))
        await settle()
        assert not waiting.done()  # nothing queued: waits for the next message
        source.ready.put_nowait(7)
        assert await waiting == [7]
        source.ready.put_nowait(None)  # the peer ended its side
        assert await ahead.take(10) == []
    finally:
        reader.cancel()


async def test_put_back_comes_first_again_in_order() -> None:
    source = Source()
    ahead = ReadAhead(source, limit=10)
    reader = asyncio.create_task(ahead.run())
    try:
        for m in (1, 2, 3, 4):
            source.ready.put_nowait(m)
        await settle()
        taken = await ahead.take(4)
        ahead.put_back(taken[2:])
        assert await ahead.take(10) == [3, 4]
    finally:
        reader.cancel()


async def test_a_fault_is_raised_after_the_messages_read_before_it() -> None:
    source = Source(fail_after=2)
    ahead = ReadAhead(source, limit=10)
    reader = asyncio.create_task(ahead.run())
    for m in (1, 2, 3):
        source.ready.put_nowait(m)
    await reader
    assert await ahead.take(1) == [1]
    assert await ahead.take(5) == [2]
    with pytest.raises(ConnectionResetError):
        await ahead.take(5)
