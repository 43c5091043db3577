"""The supervisor warms the scheduling store when it takes the lead: once before its first pass,
again after it lost the lead and took it back; never while another process leads; a warm-up
that fails costs only the warm start."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.memory.lease import MemoryLeaderLease, MemoryLeases
from application.scheduler import PassResult, Scheduler
from application.supervisor import Supervisor
from domain.errors import Unavailable
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


class Counting(Scheduler):
    warmed: int = 0
    passes: int = 0
    fail: bool = False

    async def warm(self) -> None:
        self.warmed += 1
        if self.fail:
            raise Unavailable("the database is down", fix="retry later")
        await super().warm()

    async def pass_once(self) -> PassResult:
        self.passes += 1
        return await super().pass_once()


async def test_the_store_is_warmed_each_time_the_lead_is_taken(tmp_path: Path) -> None:
    ctx = memory_context(tmp_path, MemoryBackend())
    leases = MemoryLeases()
    lease, other = MemoryLeaderLease(leases), MemoryLeaderLease(leases)
    sched = Counting(ctx)
    sup = Supervisor(ctx, lease=lease, scheduler=sched)
    assert await other.acquire()
    assert not await sup.tick()  # another process leads: nothing warmed
    assert (sched.warmed, sched.passes) == (0, 0)
    await other.release()
    assert await sup.tick() and await sup.tick()
    assert (sched.warmed, sched.passes) == (1, 2)  # once, before the first pass
    lease.crash()  # the lead lost (its session gone) and taken by the other
    assert await other.acquire()
    assert not await sup.tick()
    await other.release()
    assert await sup.tick()
    assert (sched.warmed, sched.passes) == (2, 3)  # taken back: warmed again


async def test_a_failed_warm_up_does_not_stop_the_pass(tmp_path: Path) -> None:
    ctx = memory_context(tmp_path, MemoryBackend())
    sched = Counting(ctx)
    sched.fail = True
    sup = Supervisor(ctx, scheduler=sched)  # no lease: the only control loop
    assert await sup.tick() and await sup.tick()
    assert (sched.warmed, sched.passes) == (1, 2)
