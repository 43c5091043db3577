"""Calls that arrive together are done as one (application/batched.py)."""

from __future__ import annotations

import asyncio

import pytest

from application.batched import Batched

pytestmark = pytest.mark.unit


async def test_calls_arriving_during_a_batch_make_the_next_one_and_errors_reach_their_callers() -> (
    None
):
    batches: list[list[int]] = []
    release = asyncio.Event()

    async def run(items: list[int]) -> None:
        batches.append(items)
        if len(batches) == 1:
            await release.wait()  # the first batch is slow: the next calls queue meanwhile
        if 13 in items:
            raise ValueError("unlucky batch")

    batched = Batched(run)
    first = asyncio.create_task(batched(1))
    await asyncio.sleep(0)
    later = [asyncio.create_task(batched(n)) for n in (2, 3, 13)]
    cancelled = asyncio.create_task(batched(4))
    await asyncio.sleep(0)
    cancelled.cancel()  # a caller that gives up: its item is still done, the others unharmed
    release.set()
    await first
    results = await asyncio.gather(*later, return_exceptions=True)
    assert batches == [[1], [2, 3, 13, 4]]
    assert all(isinstance(r, ValueError) for r in results)
    await batched(5)  # the queue drained: a lone call runs at once, as a batch of one
    assert batches[-1] == [5]


async def test_a_batch_ended_by_any_exception_fails_its_callers_and_a_cancelled_worker_theirs() -> (
    None
):
    class Crash(BaseException):  # as the simulator's crash of a process
        pass

    async def crash(items: list[int]) -> None:
        raise Crash

    with pytest.raises(Crash):
        await Batched(crash)(1)
    started = asyncio.Event()

    async def forever(items: list[int]) -> None:
        started.set()
        await asyncio.Event().wait()

    batched = Batched(forever)
    waiting = asyncio.create_task(batched(1))
    await started.wait()
    queued = asyncio.create_task(batched(2))
    await asyncio.sleep(0)
    assert batched._worker is not None
    batched._worker.cancel()  # the loop ends: its callers are told, none waits forever
    for caller in (waiting, queued):
        with pytest.raises(asyncio.CancelledError):
            await caller
