"""Bugs the simulator found in the scheduling core, each pinned by a minimal reproduction on
the simulator's world (real use cases, in-memory adapters, simulated backend)."""

from __future__ import annotations

import pytest

from adapters.sim import CrashPoint
from domain.fleet import Pool, Queue
from domain.lifecycle import JobState
from entrypoints.sim_scenario import PoolSpec
from entrypoints.sim_world import World

pytestmark = pytest.mark.sim

A = Pool("a", "sim", "node", 8, 96, 1_048_576, "h200")


async def world(nodes: int = 2) -> World:
    w = World([PoolSpec(A, nodes)], [Queue("default", "research")])
    await w.setup()
    return w


async def job_state(w: World, job_id: str) -> JobState:
    async with w.api.uow() as uow:
        job = await uow.jobs.get(job_id)
    assert job is not None
    return job.state


async def test_a_member_launched_by_a_coordinator_that_died_is_not_recorded_stopped_unseen() -> (
    None
):
    """The coordinator starts member 0 of a gang and dies before recording its handle; the job
    is then cancelled. The restarted coordinator must not record member 0 "stopped before it
    started" and release the reservation while member 0 runs on its GPUs."""
    w = await world()
    job = await w.submit(["h200:16"], "default")
    outcome = await w.tick(CrashPoint("after-launch", 1))
    assert outcome.crashed == CrashPoint("after-launch", 1)
    assert len(w.backends["node"].running()) == 1  # started; its handle was never recorded
    await w.cancel(job)
    await w.tick()
    await w.tick()
    assert await w.check() == []
    await w.tick()
    assert await job_state(w, job) is JobState.CANCELLED
    assert w.backends["node"].running() == []


async def test_a_gang_failing_does_not_record_an_unrecorded_running_member_as_not_started() -> None:
    """As above, but the gang fails instead (member 1's node is declared lost): member 0, which
    runs although no handle was recorded, must be stopped before the reservation is released."""
    w = await world()
    job = await w.submit(["h200:16"], "default")
    await w.tick(CrashPoint("after-launch", 1))
    await w.declare_lost("a-1")
    await w.tick()
    await w.tick()
    assert await w.check() == []
    await w.tick()
    assert await job_state(w, job) is JobState.FAILED
    assert w.backends["node"].running() == []


async def test_a_stop_that_failed_while_the_node_was_out_of_contact_is_sent_again() -> None:
    """A running job is cancelled while its node is out of contact: the stop cannot be
    delivered. Once contact is back the stop must be sent again; it never is, and the job
    stays `stopping` (holding its reservation) until the workload ends by itself."""
    w = await world(1)
    job = await w.submit(["h200:8"], "default")
    await w.tick()
    assert await job_state(w, job) is JobState.RUNNING
    await w.disconnect("a-0")
    await w.cancel(job)
    for _ in range(2):
        await w.tick()
    await w.reconnect("a-0")
    for _ in range(3):
        await w.tick()
    assert await job_state(w, job) is JobState.CANCELLED
    async with w.api.uow() as uow:
        assert await uow.reservations.live() == []
    members = [m for b in w.sim_backends for m in b.members.values()]
    assert all(not m.running for m in members)
