"""Two-phase gang launch on the node backend, simulated: the real coordinator, gateway and
daemon use cases over in-memory adapters, with coordinator and daemon crashes at random points.

What must hold whatever happens: nothing starts without a recorded commit; every member of a
committed attempt starts exactly once; an attempt undecided when its coordinator died starts
nothing and leaves no prepared container behind; a running workload is never killed or
started twice by a lost connection or a daemon restart.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.sim.nodes import SimNodeBackend, SimNodeFleet
from application import jobs, submissions
from application.context import Context
from application.gang import GangCoordinator, GangSettings
from application.logs import stream_logs
from application.supervisor import Supervisor
from domain.capsule import ENTRY, RUNNER
from domain.catalog import RuntimeSpec
from domain.fleet import Pool
from domain.lifecycle import JobState, MemberState
from domain.node_protocol import Decision
from domain.retry import RetryPolicy
from tests.support.context import ADMIN, ALICE, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.sim

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
NODES = [f"nodes-{i}" for i in range(4)]


class World:
    def __init__(self, tmp_path: Path, seed: int = 0) -> None:
        self.clock = FakeClock()
        ctx = memory_context(tmp_path, clock=self.clock, pools=(POOL,), nodes=4)
        self.ctx: Context = dataclasses.replace(ctx, coordinated={"node": SimNodeBackend()})
        self.fleet = SimNodeFleet(self.ctx, NODES)
        self.rng = random.Random(seed)
        self.supervisor = self._supervisor()

    def _supervisor(self) -> Supervisor:
        gangs = GangCoordinator(self.ctx, GangSettings(prepare_timeout=timedelta(seconds=60)))
        return Supervisor(self.ctx, gangs=gangs)

    def restart_coordinator(self) -> None:
        """The control plane dies; another takes over (a new coordinator incarnation)."""
        self.supervisor = self._supervisor()

    async def submit(
        self, profile: str = "nodes/cpu:4", command: str = "train", retry: RetryPolicy | None = None
    ) -> str:
        intent = an_intent(profiles=(profile,), params={"command": command}, retry=retry)
        preview = await submissions.create_preview(self.ctx, ALICE, intent)
        receipt = await submissions.commit(
            self.ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4())
        )
        return receipt.job_id

    async def step(self) -> None:
        await self.supervisor.tick()
        await self.fleet.pump()
        self.clock.advance(seconds=1)

    async def job(self, job_id: str) -> jobs.JobDetails:
        return await jobs.get_job(self.ctx, ADMIN, job_id)  # sees every job

    async def until(self, job_id: str, states: set[JobState], steps: int = 60) -> jobs.JobDetails:
        for _ in range(steps):
            d = await self.job(job_id)
            if d.job.state in states:
                return d
            await self.step()
        raise AssertionError(f"job {job_id} still {d.job.state} after {steps} steps")

    async def all_running(self, job_id: str, steps: int = 60) -> jobs.JobDetails:
        """The job runs once one member does; this waits until every member of the last attempt
        does (a member whose node was away gets its Commit when the node is back)."""
        for _ in range(steps):
            d = await self.job(job_id)
            members = d.attempts[-1].members if d.attempts else []
            if members and all(m.state is MemberState.RUNNING for m in members):
                return d
            await self.step()
        raise AssertionError(f"job {job_id}: members not all running after {steps} steps")

    async def finish_all(self, job_id: str, code: int = 0) -> None:
        d = await self.job(job_id)
        for m in d.attempts[-1].members:
            self.fleet.finish(m.id, code)

    async def decision(self, attempt_id: str) -> Decision | None:
        async with self.ctx.uow() as uow:
            plan = await uow.launches.plan(attempt_id)
        return plan.decision if plan else None

    async def live_reservations(self) -> int:
        async with self.ctx.uow() as uow:
            return len(await uow.reservations.live())


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.fleet.connect_all()
    return w


async def test_each_members_libraries_get_one_thread_per_cpu_of_its_share(world: World) -> None:
    """domain/threads.py on the node backend: the Prepare order's environment."""
    job_id = await world.submit(profile="nodes/cpu:3", command="train")
    await world.all_running(job_id)
    orders = [c.order for n in world.fleet.nodes.values() for c in n.runtime.containers.values()]
    assert orders
    for o in orders:  # each member of cpu:3 (a gang of 3) is one CPU's worth
        assert o.cpus == 1.0
        assert o.env["OMP_NUM_THREADS"] == o.env["OPENBLAS_NUM_THREADS"] == "1"


async def test_a_four_member_gang_runs_once_and_completes(world: World) -> None:
    job_id = await world.submit()
    d = await world.until(job_id, {JobState.RUNNING})
    members = d.attempts[-1].members
    assert len({m.node for m in members}) == 4
    assert world.fleet.starts() == {m.id: 1 for m in members}
    await world.finish_all(job_id)
    d = await world.until(job_id, {JobState.SUCCEEDED})
    await world.fleet.pump()
    assert world.fleet.containers() == {}  # forgotten once recorded final
    assert await world.live_reservations() == 0
    timeline = await jobs.job_timeline(world.ctx, ADMIN, job_id, 100)
    steps = [s.stage for s in timeline]
    assert steps == [
        "previewed", "committed", "admitted", "prepared", "launch committed", "running",
        "succeeded",
    ], steps  # fmt: skip
    prepared = timeline[3]
    assert prepared.reason.startswith("attempt 1: 4 member(s) prepared on ")
    assert [s.at for s in timeline] == sorted(s.at for s in timeline)


async def test_a_no_vote_aborts_the_gang_and_nothing_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tuneplane.supervisor")
    w = World(tmp_path)
    w.fleet = SimNodeFleet(
        w.ctx, NODES, refusal=lambda o: "image missing" if o.ref.index == 2 else None
    )
    await w.fleet.connect_all()
    job_id = await w.submit()
    d = await w.until(job_id, {JobState.FAILED})
    assert "member 2 on node" in d.job.reason and "refused: image missing" in d.job.reason
    timeline = await jobs.job_timeline(w.ctx, ADMIN, job_id, 100)
    aborted = [s for s in timeline if s.stage.startswith("launch")]
    assert [s.stage for s in aborted] == ["launch aborted"]
    assert "refused: image missing" in aborted[0].reason
    assert "prepared" not in [s.stage for s in timeline]  # not every member voted yes
    # the coordinator's end of the job has its line, as every other change of state
    assert f"job {job_id} now failed (was starting)" in caplog.text
    await w.fleet.pump()
    assert w.fleet.starts() == {} and w.fleet.containers() == {}
    assert await w.live_reservations() == 0


async def test_a_rendezvous_port_held_by_a_stranger_queues_the_job_again_on_another_port(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tuneplane.supervisor")
    for node in world.fleet.nodes.values():  # a process we know nothing of holds every port
        node.runtime.busy_ports = set(range(29500, 30000))
    job_id = await world.submit()
    for _ in range(60):
        d = await world.job(job_id)
        if d.attempts and "queued again" in d.job.reason:
            break
        await world.step()
    first = d.attempts[0]
    async with world.ctx.uow() as uow:
        plan = await uow.launches.plan(first.attempt.id)
    assert plan is not None and plan.retry
    held = plan.master_port
    assert f"rendezvous port {held} is in use" in d.job.reason
    assert d.job.state is JobState.PENDING and await world.live_reservations() == 0
    assert f"job {job_id} now pending (was starting): attempt 1" in caplog.text
    for node in world.fleet.nodes.values():  # the stranger lets go of all but that port
        node.runtime.busy_ports = {held}
    d = await world.until(job_id, {JobState.RUNNING})
    async with world.ctx.uow() as uow:
        second = await uow.launches.plan(d.attempts[-1].attempt.id)
    assert second is not None and second.master_port != held
    assert len(d.attempts) == 2 and world.fleet.starts() == {
        m.id: 1 for m in d.attempts[-1].members
    }


async def test_a_port_that_stays_held_fails_the_job_after_the_launch_retries(
    world: World,
) -> None:
    for node in world.fleet.nodes.values():
        node.runtime.busy_ports = set(range(29500, 30000))
    job_id = await world.submit()
    d = await world.until(job_id, {JobState.FAILED}, steps=120)
    assert len(d.attempts) == 3  # the first and two launch retries (GangSettings.launch_retries)
    assert "is in use on node" in d.job.reason
    assert world.fleet.starts() == {} and await world.live_reservations() == 0


@pytest.mark.parametrize("seed", range(120))
async def test_coordinator_killed_at_a_random_point(tmp_path: Path, seed: int) -> None:
    w = World(tmp_path, seed)
    await w.fleet.connect_all()
    job_id = await w.submit()
    for _ in range(w.rng.randint(1, 4)):  # the first coordinator gets this far
        await w.supervisor.tick()
        for _ in range(w.rng.randint(0, 2)):
            await w.fleet._round()
        if w.rng.random() < 0.2:
            await w.fleet.crash_daemon(w.rng.choice(NODES))
            await w.fleet.connect(w.rng.choice(NODES))
    first = (await w.job(job_id)).attempts
    decided = await w.decision(first[0].attempt.id) if first else None
    w.restart_coordinator()
    for name in NODES:  # every daemon that crashed comes back
        if w.fleet.nodes[name].session is None:
            await w.fleet.connect(name)
    d = await w.all_running(job_id)
    starts = w.fleet.starts()
    if first and decided is None:  # undecided when it died: presumed abort, queued again
        assert [a.attempt.number for a in d.attempts] == [1, 2]
        assert not any(m.id in starts for m in d.attempts[0].members)
        assert await w.decision(d.attempts[0].attempt.id) is Decision.ABORT
        assert not any(m.id in w.fleet.containers() for m in d.attempts[0].members)
    else:  # committed (or not begun): exactly one attempt
        assert len(d.attempts) == 1
    assert {m.id: starts.get(m.id) for m in d.attempts[-1].members} == {
        m.id: 1 for m in d.attempts[-1].members
    }
    await w.finish_all(job_id)
    await w.until(job_id, {JobState.SUCCEEDED})
    assert sum(w.fleet.kills().values()) == 0
    assert await w.live_reservations() == 0


@pytest.mark.parametrize("seed", range(30))
async def test_daemon_crashes_and_disconnects_never_kill_or_restart_a_workload(
    tmp_path: Path, seed: int
) -> None:
    w = World(tmp_path, seed)
    await w.fleet.connect_all()
    job_id = await w.submit()
    d = await w.until(job_id, {JobState.RUNNING})
    members = d.attempts[-1].members
    for _ in range(8):
        name = w.rng.choice(NODES)
        fault = w.rng.choice(["crash", "disconnect", "partition"])
        if fault == "crash":
            await w.fleet.crash_daemon(name)
        elif fault == "disconnect":
            await w.fleet.disconnect(name)
        else:
            w.fleet.partition(name)
        await w.step()
        if w.rng.random() < 0.3:  # a member ends while its node may be out of contact
            w.fleet.finish(w.rng.choice(members).id, 0)
        await w.step()
        if w.fleet.nodes[name].session is None or w.fleet.nodes[name].partitioned:
            await w.fleet.connect(name)
        await w.step()
    assert await w.live_reservations() == 1  # held throughout: nothing was known stopped
    await w.finish_all(job_id)
    for name in NODES:
        await w.fleet.connect(name)
    d = await w.until(job_id, {JobState.SUCCEEDED})
    assert w.fleet.starts() == {m.id: 1 for m in members}
    assert sum(w.fleet.kills().values()) == 0
    assert await w.live_reservations() == 0


async def test_a_ray_gang_runs_its_capsule_checks_and_ends_with_its_driver(world: World) -> None:
    """Every member of a Ray gang starts the runner (the Job Capsule is checked), which then
    starts the head and the driver on member 0 and a worker on the others; once the driver
    succeeded the workers are stopped and the job succeeds."""
    ray = RuntimeSpec("ray-sim", "ray:test", None, "ray", digest="sha256:" + "e" * 64)
    async with world.ctx.uow() as uow:
        await uow.runtimes.add(
            dataclasses.replace(ray, added_by="admin", added_at=world.clock.now())
        )
        await uow.commit()
    intent = an_intent(profiles=("nodes/cpu:4",), params={"command": "python driver.py"})
    preview = await submissions.create_preview(
        world.ctx, ALICE, dataclasses.replace(intent, runtime="ray-sim")
    )
    receipt = await submissions.commit(
        world.ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4())
    )
    job_id = receipt.job_id
    d = await world.all_running(job_id)
    orders = {
        e.order.ref.index: e.order
        for node in world.fleet.nodes.values()
        for e in node.journal.entries()
    }
    assert sorted(orders) == [0, 1, 2, 3] and all(o.capsule for o in orders.values())
    head = orders[0].command
    assert head[:2] == ("/bin/sh", RUNNER) and "ray start --head" in head[4]
    assert head[-2:] == ("/bin/sh", ENTRY)  # the driver runs after the head is up
    assert all("ray start --address=" in orders[i].command[4] for i in (1, 2, 3))
    assert all(orders[i].command[:2] == ("/bin/sh", RUNNER) for i in (1, 2, 3))

    driver = next(m for m in d.attempts[-1].members if m.index == 0)
    world.fleet.finish(driver.id, 0)
    d = await world.until(job_id, {JobState.SUCCEEDED, JobState.FAILED})
    assert d.job.state is JobState.SUCCEEDED, d.job.reason
    workers = [m for m in d.attempts[-1].members if m.index > 0]
    assert {(m.state, m.exit_code) for m in workers} == {(MemberState.SUCCEEDED, 143)}
    await world.fleet.pump()
    assert world.fleet.containers() == {} and await world.live_reservations() == 0


async def test_a_coordinated_members_log_is_its_live_log(world: World) -> None:
    """The node backend is registered as coordinated: a running member's output is read from
    the live log its node sent (stored by the gateway), never asked of the backend."""
    job_id = await world.submit()
    d = await world.until(job_id, {JobState.RUNNING})
    member = d.attempts[-1].members[1]
    async with world.ctx.uow() as uow:
        assert await uow.logs.append_live(member.id, 0, b"step 1\n", 1 << 20)
        await uow.commit()
    chunks = await stream_logs(world.ctx, ALICE, job_id, follow=False, member=1)
    assert b"".join([c async for c in chunks]) == b"step 1\n"
