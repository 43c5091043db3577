"""Contract: the scheduler's kept view of the pending jobs (``Scheduler._view``, read through
``pending_changes``) never costs more than a retried placement: with jobs added, cancelled and
placed by another scheduler between its passes, and two schedulers racing over the same jobs,
every job gets at most one attempt and no GPU is reserved twice."""

from __future__ import annotations

import asyncio

import pytest

from adapters.sim.clock import CountingIds, SimClock
from application.context import Context
from application.scheduler import Scheduler
from domain.catalog import Catalog
from domain.lifecycle import JobState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import T0
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_start import start_of

pytestmark = pytest.mark.contract


def scheduler(uow_factory: UnitOfWorkFactory, ids: CountingIds) -> Scheduler:
    ctx = Context(
        uow=uow_factory,
        clock=SimClock(T0),
        ids=ids,
        catalog=Catalog(methods=()),
        backends={},
        blobs=None,  # the scheduler stores no blob
        new_secret=lambda: "x",
    )
    return Scheduler(ctx, batch=2)


async def reserved_gpus(uow_factory: UnitOfWorkFactory) -> list[tuple[str, int]]:
    async with uow_factory() as uow:
        live = await uow.reservations.live()
    return sorted((a.node, g) for r in live for a in r.assignments for g in a.gpus)


async def release_some(uow_factory: UnitOfWorkFactory, count: int) -> None:
    """Not a job's end: only room made on the nodes (as the admission benchmark does)."""
    async with uow_factory() as uow:
        for r in (await uow.reservations.live())[:count]:
            await uow.reservations.release(r.attempt_id)
        await uow.commit()


async def test_changes_between_passes_and_another_scheduler_are_followed(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory, nodes=2)  # 16 GPUs
    ids = CountingIds()
    one, other = scheduler(uow_factory, ids), scheduler(uow_factory, ids)
    first = [gpu_job(4) for _ in range(4)]
    await add(uow_factory, *first)
    assert sorted((await one.pass_once()).reserved) == sorted(j.id for j in first)
    cancelled, elsewhere = gpu_job(1), gpu_job(1)
    await add(uow_factory, cancelled, elsewhere)
    assert (await one.pass_once()).reserved == []  # no room: both stay in its view
    async with uow_factory() as uow:
        await uow.jobs.update(cancelled.moved(JobState.CANCELLED, T0), JobState.PENDING)
        await uow.commit()
    await release_some(uow_factory, 1)
    assert (await other.pass_once()).reserved == [elsewhere.id]
    mine = gpu_job(2)
    await add(uow_factory, mine)
    result = await one.pass_once()  # its view follows: it tries neither of the others
    assert (result.reserved, result.lost) == ([mine.id], [])
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == 16 - 4 + 1 + 2


async def test_two_schedulers_racing_on_kept_views_reserve_each_job_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory, nodes=2)
    ids = CountingIds()
    a, b = scheduler(uow_factory, ids), scheduler(uow_factory, ids)
    await add(uow_factory, *[gpu_job(4) for _ in range(4)])
    assert len((await a.pass_once()).reserved) == 4  # the fleet is full
    jobs = [gpu_job(2) for _ in range(6)]  # 12 GPUs asked
    await add(uow_factory, *jobs)
    assert (await a.pass_once()).reserved == (await b.pass_once()).reserved == []
    await release_some(uow_factory, 2)  # 8 GPUs free; both views hold the six jobs
    ra, rb = await asyncio.gather(a.pass_once(), b.pass_once())
    assert len(ra.reserved) + len(rb.reserved) == 4
    assert not set(ra.reserved) & set(rb.reserved)
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == 16
    async with uow_factory() as uow:
        attempts = [len(await uow.attempts.for_job(j.id)) for j in jobs]
    assert sorted(attempts) == [0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("groups", [1, 3])
async def test_a_conflict_in_a_large_batch_costs_only_its_own_job(
    uow_factory: UnitOfWorkFactory, monkeypatch: pytest.MonkeyPatch, groups: int
) -> None:
    """A batch that hits a conflict is stored again in smaller batches, then one by one; when
    the pass is stored in groups at once, the other groups are not touched by it."""
    monkeypatch.setattr("application.scheduler.RETRY_BATCH", 2)
    await setup_fleet(uow_factory, nodes=2)
    ids = CountingIds()
    one = scheduler(uow_factory, ids)
    one.batch = 8
    one.store_groups = groups
    jobs = [gpu_job(2) for _ in range(8)]
    await add(uow_factory, *jobs)
    decisions, attempts = await one.decide()
    assert len(decisions.placements) == 8
    rival = decisions.placements[5]  # its GPUs go to another job first
    other = gpu_job(2)
    async with uow_factory() as uow:
        await uow.jobs.add(other)
        taken = rival.assignments[0]
        await uow.scheduling.start([start_of(other, taken.node, *taken.gpus)], T0)
        await uow.commit()
    reserved, lost = await one.apply(decisions.placements, attempts)
    assert lost == [rival.job_id]
    assert reserved == [p.job_id for p in decisions.placements if p is not rival]


async def test_a_pass_stored_in_groups_at_once_reserves_every_placement_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Four transactions at once (groups that share no node), gangs over two nodes among
    single-node jobs: every placement is reserved once, no GPU twice, as stored one by one."""
    await setup_fleet(uow_factory, nodes=6)  # 48 GPUs
    ids = CountingIds()
    one = scheduler(uow_factory, ids)
    one.store_groups = 4
    jobs = [gpu_job(8, members=2) for _ in range(2)] + [gpu_job(g) for g in (4, 2, 2, 4, 1)]
    await add(uow_factory, *jobs)
    decisions, _ = await one.decide()
    result = await one.pass_once()
    assert result.reserved == [p.job_id for p in decisions.placements] and result.lost == []
    assert len(result.reserved) == len(jobs)
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == 2 * 16 + 4 + 2 + 2 + 4 + 1
    async with uow_factory() as uow:
        attempts = [len(await uow.attempts.for_job(j.id)) for j in jobs]
    assert attempts.count(1) == len(result.reserved)
