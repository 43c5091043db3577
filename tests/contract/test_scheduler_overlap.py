"""Contract: the overlapped pass (application/overlap.py) stores placements while the rest of
the pass is decided, on both adapters, and keeps what a pass stored one batch after the other
kept: every placement reserved once and no GPU twice, a conflict costs only its own job,
deciding that fails stores nothing more."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence

import pytest

from adapters.sim.clock import CountingIds
from application.scheduler import Scheduler, collector_paused
from domain.admission import Decisions, Placement, Snapshot, decide, decide_steps
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import T0
from tests.contract.test_pending_changes import add
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_scheduler_view import reserved_gpus, scheduler
from tests.contract.test_start import start_of

pytestmark = pytest.mark.contract


class Recording(Scheduler):
    """The real scheduler; it remembers each batch it stored and may act right after its read
    (``after_read``: what another writer does between a pass's read and its store)."""

    batches: list[list[str]]
    collecting: list[bool]  # whether the garbage collector was on, at each batch
    after_read: Callable[[Snapshot], Awaitable[None]] | None = None

    async def read(self) -> tuple[Snapshot, dict[str, int]]:
        snapshot, attempts = await super().read()
        if self.after_read is not None:
            await self.after_read(snapshot)
        return snapshot, attempts

    async def store(self, placements: Sequence[Placement], attempts: Mapping[str, int]) -> set[str]:
        self.batches.append([p.job_id for p in placements])
        self.collecting.append(gc.isenabled())
        return await super().store(placements, attempts)


def recording(uow_factory: UnitOfWorkFactory, overlap: int, batch: int) -> Recording:
    plain = scheduler(uow_factory, CountingIds())
    one = Recording(plain.ctx, batch=batch, overlap=overlap)
    one.batches, one.collecting = [], []
    return one


async def attempts_of(uow_factory: UnitOfWorkFactory, ids: Sequence[str]) -> list[int]:
    async with uow_factory() as uow:
        return [len(await uow.attempts.for_job(i)) for i in ids]


@pytest.mark.parametrize("groups", [1, 2])
async def test_a_pass_stored_while_decided_reserves_every_placement_once(
    uow_factory: UnitOfWorkFactory, groups: int
) -> None:
    await setup_fleet(uow_factory, nodes=4)  # 32 GPUs
    jobs = [gpu_job(g) for g in (4, 2, 1, 8, 2, 4, 1, 1, 2, 8, 8, 4)]  # 45 GPUs asked
    jobs[3:3] = [gpu_job(8, members=2)]
    await add(uow_factory, *jobs)
    one = recording(uow_factory, overlap=2, batch=2)
    one.store_groups = groups
    expected, _ = await one.decide()
    result = await one.pass_once()
    assert result.decisions == expected
    assert result.reserved == [p.job_id for p in expected.placements] and result.lost == []
    assert len(one.batches) > 1  # stored in steps, in order, each placement once
    assert [j for b in one.batches for j in b] == result.reserved
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == sum(p.gpus for p in expected.placements) > 24
    assert await attempts_of(uow_factory, result.reserved) == [1] * len(result.reserved)
    assert not one._prepared  # every start built while deciding was taken by its batch
    assert (await one.pass_once()).reserved == []  # the rest wait: the fleet is full
    assert gc.isenabled() and one.collecting == [False] * len(one.batches)  # paused in a pass


async def test_a_pass_leaves_a_collector_that_was_off_off(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory, nodes=1)
    await add(uow_factory, gpu_job(1))
    gc.disable()
    try:
        assert len((await recording(uow_factory, overlap=2, batch=2).pass_once()).reserved) == 1
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_a_pass_stuck_past_the_limit_turns_the_collector_back_on() -> None:
    """The pause is process-wide: a pass that outlives its bound (a lock, a slow database) does
    not keep the API process's collector off; a pass that ends in time leaves no timer."""
    with collector_paused(limit=0.01):
        assert not gc.isenabled()
        await asyncio.sleep(0.05)  # the pass awaits past its bound (timers fire in deadline order)
        assert gc.isenabled()
    with collector_paused(limit=0.01):
        assert not gc.isenabled()
    gc.disable()  # someone else turns it off after the pass: the pass's timer is gone
    try:
        await asyncio.sleep(0.03)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_a_conflict_mid_stream_costs_only_its_own_job(
    uow_factory: UnitOfWorkFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer takes the GPUs of the sixth placement after the pass read the fleet:
    its batch is stored again in smaller ones, the batches before and after it are kept."""
    monkeypatch.setattr("application.scheduler.RETRY_BATCH", 2)
    await setup_fleet(uow_factory, nodes=2)
    jobs = [gpu_job(2) for _ in range(8)]
    await add(uow_factory, *jobs)
    one = recording(uow_factory, overlap=3, batch=4)
    other = gpu_job(2)
    rival: list[Placement] = []

    async def take_the_sixth(snapshot: Snapshot) -> None:
        rival.append(decide(snapshot, explain_waits=False).placements[5])
        async with uow_factory() as uow:
            await uow.jobs.add(other)
            taken = rival[0].assignments[0]
            await uow.scheduling.start([start_of(other, taken.node, *taken.gpus)], T0)
            await uow.commit()

    one.after_read = take_the_sixth
    result = await one.pass_once()
    assert result.lost == [rival[0].job_id]
    assert result.reserved == [j.id for j in jobs if j.id != rival[0].job_id]
    assert len(one.batches) >= 3  # the batch that hit it, then its retries
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == 16
    assert await attempts_of(uow_factory, [rival[0].job_id]) == [0]  # decided again later
    assert not one._prepared  # the retried batches built their starts anew, none is left


async def test_deciding_that_fails_mid_pass_stores_nothing_more(
    uow_factory: UnitOfWorkFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches handed over before the failure are stored whole (each its own
    transaction); nothing after; the error is the pass's, and the next pass goes on."""
    await setup_fleet(uow_factory, nodes=2)
    jobs = [gpu_job(1) for _ in range(12)]
    await add(uow_factory, *jobs)

    def failing(
        snapshot: Snapshot, explain_waits: bool, every: int
    ) -> Generator[list[Placement], None, Decisions]:
        steps = decide_steps(snapshot, explain_waits, every)
        yield next(steps)
        yield next(steps)
        raise RuntimeError("decide failed")

    monkeypatch.setattr("application.overlap.decide_steps", failing)
    one = recording(uow_factory, overlap=3, batch=100)
    with pytest.raises(RuntimeError, match="decide failed"):
        await one.pass_once()
    stored = [j for b in one.batches for j in b]
    assert stored == [j.id for j in jobs[: len(stored)]] and 0 < len(stored) <= 6
    assert not one._prepared  # what was built for the batches never stored is dropped
    assert await attempts_of(uow_factory, [j.id for j in jobs]) == [1] * len(stored) + [0] * (
        12 - len(stored)
    )
    monkeypatch.undo()
    result = await Scheduler(one.ctx).pass_once()  # the same ids: a restarted scheduler
    assert sorted(result.reserved) == sorted(j.id for j in jobs[len(stored) :])
    gpus = await reserved_gpus(uow_factory)
    assert len(gpus) == len(set(gpus)) == 12


async def test_a_pass_cancelled_mid_store_leaves_no_store_running(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The first batch is held before it reaches the database; the pass is cancelled while it
    waits for it: the batch is cancelled with it, nothing is stored then or afterwards."""
    await setup_fleet(uow_factory, nodes=2)
    jobs = [gpu_job(1) for _ in range(6)]
    await add(uow_factory, *jobs)
    held, release = asyncio.Event(), asyncio.Event()

    class Held(Recording):
        async def store(
            self, placements: Sequence[Placement], attempts: Mapping[str, int]
        ) -> set[str]:
            held.set()
            await release.wait()  # never set: the pass is cancelled meanwhile
            return await super().store(placements, attempts)

    one = Held(recording(uow_factory, overlap=2, batch=100).ctx, batch=100, overlap=2)
    one.batches, one.collecting = [], []
    task = asyncio.create_task(one.pass_once())
    await held.wait()
    await asyncio.sleep(0.05)  # deciding ends; the pass waits for the held batch
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.sleep(0.05)
    assert one.batches == [] and gc.isenabled()
    assert await attempts_of(uow_factory, [j.id for j in jobs]) == [0] * 6
    assert await reserved_gpus(uow_factory) == []
