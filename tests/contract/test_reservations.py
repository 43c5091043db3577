"""Contract: launch reservations (ReservationRepository) and the scheduler's snapshot
(SchedulingRepository). The store itself refuses double-booking: these tests reserve by hand
what a buggy or racing scheduler might, and check that nothing of a refused reservation stays.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from domain.admission import Assignment, NodeView, QueueView, Reservation, Snapshot
from domain.auth import Role, User
from domain.catalog import Resources
from domain.errors import Conflict
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Team
from domain.jobs import Attempt, Job
from domain.lifecycle import JobState
from domain.requests import RoleSpec
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import a_job, a_spec, an_attempt, at

pytestmark = pytest.mark.contract

GPU = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")
CPU = Pool("cpu", "main", "local", 0, 4, 8192)
FULL = (96_000, 1_048_576)  # a GPU node's mcpu and memory


def gpu_job(gpus: int, queue: str = "default", members: int = 1, **kw: object) -> Job:
    per = Resources(cpus=12.0 * gpus, memory_mb=131_072 * gpus, gpus=gpus, gpu_model="h200")
    role = RoleSpec("main", f"h200:{gpus * members}", "a", members, per)
    return a_job(spec=a_spec(roles=(role,), queue=queue), **kw)


def on(node: str, *gpus: int, member: int = 0, mcpu: int | None = None, mem: int = 0) -> Assignment:
    share = 12_000 * len(gpus) if mcpu is None else mcpu
    return Assignment(member, "main", node, gpus, share, mem or 131_072 * len(gpus))


async def setup_fleet(uow_factory: UnitOfWorkFactory, nodes: int = 2) -> None:
    async with uow_factory() as uow:
        await uow.policy.put_team(Team("t"))
        await uow.policy.put_queue(Queue("default", "t"))
        await uow.policy.put_queue(Queue("high", "t", priority=5, gpu_quota=32))
        await uow.fleet.put_pool(GPU)
        await uow.fleet.put_pool(CPU)
        for i in range(nodes):
            await uow.fleet.put_node(Node(f"a-{i}", "a"))
        await uow.fleet.put_node(Node("c-0", "cpu"))
        await uow.commit()


async def new_attempt(uow: UnitOfWork, job: Job | None = None) -> Attempt:
    job = job or gpu_job(1, state=JobState.STARTING)
    if await uow.jobs.get(job.id) is None:
        await uow.jobs.add(job)
    attempt = an_attempt(job, len(await uow.attempts.for_job(job.id)) + 1)
    await uow.attempts.add(attempt)
    return attempt


def reservation(attempt: Attempt, *assignments: Assignment, queue: str = "default") -> Reservation:
    return Reservation(attempt.id, attempt.job_id, queue, assignments, at(2))


async def reserve(uow_factory: UnitOfWorkFactory, *assignments: Assignment) -> Reservation:
    async with uow_factory() as uow:
        r = reservation(await new_attempt(uow), *assignments)
        await uow.reservations.reserve(r)
        await uow.commit()
    return r


async def node_view(uow_factory: UnitOfWorkFactory, name: str) -> NodeView:
    async with uow_factory() as uow:
        snap = await uow.scheduling.snapshot(100)
    return next(v for v in snap.nodes if v.name == name)


async def test_reserve_then_get_and_live(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    gang = (on("a-0", 0, 1, 2, 3, member=0), on("a-1", 4, 5, 6, 7, member=1))
    first = await reserve(uow_factory, *gang)
    second = await reserve(uow_factory, on("c-0", mcpu=1500, mem=1024))
    async with uow_factory() as uow:
        assert await uow.reservations.get(first.attempt_id) == first
        assert await uow.reservations.get(second.attempt_id) == second
        assert await uow.reservations.get("att-missing") is None
        assert await uow.reservations.live() == sorted([first, second], key=lambda r: r.attempt_id)
    assert await node_view(uow_factory, "a-0") == NodeView(
        "a-0", "a", (4, 5, 6, 7), FULL[0] - 48_000, FULL[1] - 4 * 131_072
    )
    assert await node_view(uow_factory, "c-0") == NodeView("c-0", "cpu", (), 2500, 7168)


async def test_a_reserved_gpu_cannot_be_reserved_again(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    first = await reserve(uow_factory, on("a-0", 0, 1))
    async with uow_factory() as uow:
        attempt = await new_attempt(uow)
        # a gang whose first member is fine and whose second takes GPU 1 of a-0
        second = reservation(attempt, on("a-1", 0, member=0), on("a-0", 1, 2, member=1))
        with pytest.raises(Conflict, match="GPU"):  # named as a GPU, not as the attempt
            await uow.reservations.reserve(second)
    async with uow_factory() as uow:  # the failed unit rolled back: nothing of it is left
        assert await uow.reservations.get(attempt.id) is None
        assert await uow.reservations.live() == [first]
    assert await node_view(uow_factory, "a-1") == NodeView("a-1", "a", tuple(range(8)), *FULL)
    assert (await node_view(uow_factory, "a-0")).free_gpus == (2, 3, 4, 5, 6, 7)


@pytest.mark.parametrize(
    "too_much",
    [
        pytest.param(on("c-0", mcpu=4001, mem=1), id="cpus"),
        pytest.param(on("c-0", mcpu=1, mem=8193), id="memory"),
        pytest.param(on("a-0", 8), id="no-such-gpu"),
        pytest.param(on("a-0", -1), id="negative-gpu"),
        pytest.param(on("c-0", 0, mcpu=1, mem=1), id="gpu-of-a-node-without-gpus"),
        pytest.param(on("a-0", 3, 3), id="one-gpu-listed-twice"),
        pytest.param(on("nowhere", 0), id="no-such-node"),
    ],
)
async def test_overcommit_and_unknown_resources_are_refused(
    uow_factory: UnitOfWorkFactory, too_much: Assignment
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.reservations.reserve(reservation(await new_attempt(uow), too_much))
    assert await node_view(uow_factory, "c-0") == NodeView("c-0", "cpu", (), 4000, 8192)


async def test_cpus_and_memory_add_up_across_reservations(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    await reserve(uow_factory, on("c-0", mcpu=2500, mem=4096))
    await reserve(uow_factory, on("c-0", mcpu=1500, mem=4096))  # exactly full
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.reservations.reserve(
                reservation(await new_attempt(uow), on("c-0", mcpu=1, mem=0))
            )
    assert await node_view(uow_factory, "c-0") == NodeView("c-0", "cpu", (), 0, 0)


async def test_an_attempt_holds_at_most_one_reservation(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    first = await reserve(uow_factory, on("a-0", 0))
    async with uow_factory() as uow:
        attempt = await uow.attempts.get(first.attempt_id)
        assert attempt is not None
        with pytest.raises(Conflict):
            await uow.reservations.reserve(reservation(attempt, on("a-1", 0)))
    assert (await node_view(uow_factory, "a-1")).free_gpus == tuple(range(8))


async def test_release_is_idempotent_and_frees_the_capacity(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    gang = await reserve(uow_factory, on("a-0", 0, 1, member=0), on("a-0", 5, member=1))
    other = await reserve(uow_factory, on("a-0", 2))
    async with uow_factory() as uow:
        assert await uow.reservations.release(gang.attempt_id)
        assert not await uow.reservations.release(gang.attempt_id)
        await uow.commit()
    async with uow_factory() as uow:
        assert not await uow.reservations.release(gang.attempt_id)
        assert not await uow.reservations.release("att-missing")
        assert await uow.reservations.get(gang.attempt_id) is None
        assert await uow.reservations.live() == [other]
    assert await node_view(uow_factory, "a-0") == NodeView(
        "a-0", "a", (0, 1, 3, 4, 5, 6, 7), FULL[0] - 12_000, FULL[1] - 131_072
    )
    async with uow_factory() as uow:  # released capacity can be reserved again
        again = reservation(await new_attempt(uow), on("a-0", 0, 1, 5))
        await uow.reservations.reserve(again)
        await uow.commit()


async def test_concurrent_reservations_of_one_gpu_one_wins(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as setup:
        attempts = [await new_attempt(setup), await new_attempt(setup)]
        await setup.commit()
    async with uow_factory() as one, uow_factory() as two:
        await one.reservations.reserve(reservation(attempts[0], on("a-0", 3)))
        # the second waits for the first unit (its node row, or the GPU's key) …
        late = asyncio.ensure_future(
            two.reservations.reserve(reservation(attempts[1], on("a-0", 3, 4)))
        )
        await asyncio.sleep(0.2)
        assert not late.done()
        await one.commit()
        with pytest.raises(Conflict):  # … and is refused once it committed
            await late
    async with uow_factory() as uow:
        assert [r.attempt_id for r in await uow.reservations.live()] == [attempts[0].id]


async def test_concurrent_releases_release_once(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    r = await reserve(uow_factory, on("c-0", mcpu=3000, mem=4096))
    async with uow_factory() as one, uow_factory() as two:
        assert await one.reservations.release(r.attempt_id)
        late = asyncio.ensure_future(two.reservations.release(r.attempt_id))
        await asyncio.sleep(0.2)
        await one.commit()
        assert not await late
        await two.commit()
    assert await node_view(uow_factory, "c-0") == NodeView("c-0", "cpu", (), 4000, 8192)


async def test_a_pool_with_live_reservations_keeps_its_shape(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    r = await reserve(uow_factory, on("a-1", 0))
    for changed in (
        replace(GPU, gpus_per_node=4),
        replace(GPU, cpus_per_node=48),
        replace(GPU, memory_mb_per_node=1024),
        replace(GPU, backend="node"),
    ):
        async with uow_factory() as uow:
            with pytest.raises(Conflict):
                await uow.fleet.put_pool(changed)
    async with uow_factory() as uow:  # what does not change the shape goes
        await uow.fleet.put_pool(replace(GPU, description="busy", fleet="other"))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.reservations.release(r.attempt_id)
        await uow.fleet.put_pool(replace(GPU, gpus_per_node=4, cpus_per_node=48))
        await uow.commit()
    assert await node_view(uow_factory, "a-1") == NodeView(
        "a-1", "a", (0, 1, 2, 3), 48_000, FULL[1]
    )
    async with uow_factory() as uow:
        with pytest.raises(Conflict):  # GPU 4 is gone with the new shape
            await uow.reservations.reserve(reservation(await new_attempt(uow), on("a-1", 4)))


async def test_a_node_with_live_reservations_stays_in_its_pool(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    r = await reserve(uow_factory, on("a-0", 0))
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.fleet.put_node(Node("a-0", "cpu"))
    async with uow_factory() as uow:  # its states may change
        await uow.fleet.put_node(Node("a-0", "a", SchedState.CORDONED))
        assert await uow.reservations.release(r.attempt_id)
        await uow.fleet.put_node(Node("a-0", "cpu"))  # empty: it may move
        await uow.commit()
    assert await node_view(uow_factory, "a-0") == NodeView("a-0", "cpu", (), 4000, 8192)


# -- the snapshot -----------------------------------------------------------------------------


async def add_jobs(uow_factory: UnitOfWorkFactory, *jobs: Job) -> None:
    async with uow_factory() as uow:
        for job in jobs:
            await uow.jobs.add(job)
        await uow.commit()


async def test_snapshot_pending_jobs_in_queue_order(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.policy.put_queue(Queue("low", "t", priority=-1))
        await uow.commit()
    jobs = {
        "late-high": gpu_job(1, "high", created_at=at(9)),
        "early-high": gpu_job(2, "high", created_at=at(1)),
        "default-1": gpu_job(8, created_at=at(0), id="job-b"),
        "default-2": gpu_job(8, created_at=at(0), id="job-a"),  # same time: by id
        "gone-queue": gpu_job(1, "removed", created_at=at(0.5)),  # as priority 0
        "low": gpu_job(1, "low", created_at=at(-5)),
        "running": gpu_job(1, "high", created_at=at(-9), state=JobState.RUNNING),
    }
    await add_jobs(uow_factory, *jobs.values())
    order = ["early-high", "late-high", "default-2", "default-1", "gone-queue", "low"]
    async with uow_factory() as uow:
        snap = await uow.scheduling.snapshot(100)
        assert [j.id for j in snap.pending] == [jobs[k].id for k in order]
        first = snap.pending[0]
        assert first.queue == "high"
        assert first.created_at == at(1)
        assert first.roles == jobs["early-high"].spec.roles
        assert first.gpus == 2
        assert [j.id for j in (await uow.scheduling.snapshot(3)).pending] == [
            jobs[k].id for k in order[:3]
        ]
        assert (await uow.scheduling.snapshot(0)).pending == []


async def test_snapshot_fleet_queues_and_usage(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory, nodes=3)
    async with uow_factory() as uow:
        await uow.fleet.set_node_state("a-1", sched=SchedState.CORDONED)
        await uow.fleet.set_node_state("a-2", connectivity=Connectivity.DISCONNECTED)
        await uow.policy.put_user(User("u", Role.MEMBER, ("t",)))  # not in the snapshot
        await uow.commit()
    async with uow_factory() as uow:
        high = reservation(
            await new_attempt(uow), on("a-0", 0, 1, member=0), on("a-1", 7, member=1), queue="high"
        )
        await uow.reservations.reserve(high)
        await uow.reservations.reserve(
            reservation(await new_attempt(uow), on("c-0", mcpu=1000, mem=512), queue="high")
        )
        await uow.reservations.reserve(reservation(await new_attempt(uow), on("a-0", 4)))
        await uow.commit()
    async with uow_factory() as uow:
        snap = await uow.scheduling.snapshot(10)
    assert isinstance(snap, Snapshot)
    assert dict(snap.pools) == {"a": GPU, "cpu": CPU}
    assert list(snap.nodes) == [
        NodeView("a-0", "a", (2, 3, 5, 6, 7), FULL[0] - 36_000, FULL[1] - 3 * 131_072),
        NodeView("a-1", "a", tuple(range(7)), FULL[0] - 12_000, FULL[1] - 131_072, "cordoned"),
        NodeView("a-2", "a", tuple(range(8)), *FULL, why_not="disconnected"),
        NodeView("c-0", "cpu", (), 3000, 7680),
    ]
    assert dict(snap.queues) == {
        "default": QueueView(Queue("default", "t"), gpus_in_use=1, jobs_in_use=1),
        "high": QueueView(Queue("high", "t", 5, 32), gpus_in_use=3, jobs_in_use=2),
    }
    assert {type(q.gpus_in_use) for q in snap.queues.values()} == {int}  # not Decimal
    assert snap.pending == []  # the reserved jobs are `starting`


async def test_snapshot_reads_specs_stored_before_roles(pg_engine: AsyncEngine) -> None:
    """PostgreSQL only: a spec written before roles existed (profile, members, resources)."""
    job = gpu_job(1)
    async with PostgresUnitOfWork(pg_engine) as uow:
        await uow.jobs.add(job)
        await uow.commit()
    old = {"profile": "cpu:2", "members": 1, "resources": {"cpus": 2.0, "memory_mb": 4096}}
    async with pg_engine.begin() as conn:
        await conn.execute(
            text("UPDATE jobs SET spec = (spec - 'roles') || CAST(:old AS jsonb) WHERE id = :id"),
            {"old": json.dumps(old), "id": job.id},
        )
    async with PostgresUnitOfWork(pg_engine) as uow:
        (pending,) = (await uow.scheduling.snapshot(10)).pending
    assert pending.roles == (RoleSpec("main", "cpu:2", "local", 1, Resources(2.0, 4096)),)
