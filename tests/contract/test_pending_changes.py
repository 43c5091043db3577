"""Contract: SchedulingRepository.pending_changes — a view kept from its answers is the pending
jobs as of the last read, whatever committed in between and in whatever order."""

from __future__ import annotations

import pytest

from domain.admission import PendingChanges, PendingJob
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_start import start_of

pytestmark = pytest.mark.contract


class View:
    """What the scheduler keeps: the pending jobs, merged from every answer in turn."""

    def __init__(self) -> None:
        self.jobs: dict[str, PendingJob] = {}
        self.mark: int | None = None

    async def read(self, uow_factory: UnitOfWorkFactory) -> PendingChanges:
        async with uow_factory() as uow:
            changes = await uow.scheduling.pending_changes(self.mark)
        if changes.full:
            self.jobs = {j.id: j for j in changes.pending}
        else:
            for gone in changes.gone:
                self.jobs.pop(gone, None)
            self.jobs.update((j.id, j) for j in changes.pending)
        self.mark = changes.mark
        return changes

    def summary(self) -> dict[str, tuple[int, object]]:
        return {j.id: (j.attempts, j.not_before) for j in self.jobs.values()}


async def add(uow_factory: UnitOfWorkFactory, *jobs: Job) -> None:
    async with uow_factory() as uow:
        for job in jobs:
            await uow.jobs.add(job)
        await uow.commit()


async def test_a_first_read_is_every_pending_job(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    one, two, done = gpu_job(1), gpu_job(2), gpu_job(1, state=JobState.CANCELLED)
    await add(uow_factory, one, two, done)
    view = View()
    changes = await view.read(uow_factory)
    assert changes.full
    assert view.summary() == {one.id: (0, None), two.id: (0, None)}
    assert {j.id: j.roles for j in changes.pending} == {
        one.id: one.spec.roles,
        two.id: two.spec.roles,
    }


async def test_the_view_follows_adds_starts_cancels_and_returns_to_pending(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    kept, started, cancelled = gpu_job(1), gpu_job(1), gpu_job(1)
    await add(uow_factory, kept, started, cancelled)
    view = View()
    await view.read(uow_factory)
    late = gpu_job(2)
    await add(uow_factory, late)
    async with uow_factory() as uow:
        assert await uow.scheduling.start([start_of(started, "a-0", 0)], at(2)) == [started.id]
        await uow.jobs.update(cancelled.moved(JobState.CANCELLED, at(2)), JobState.PENDING)
        await uow.commit()
    changes = await view.read(uow_factory)
    assert view.summary() == {kept.id: (0, None), late.id: (0, None)}
    if not changes.full:  # only what changed travels
        assert {j.id for j in changes.pending} == {late.id}
        assert set(changes.gone) == {started.id, cancelled.id}
    async with uow_factory() as uow:  # its attempt failed: pending again, after a backoff
        job = await uow.jobs.get(started.id)
        assert job is not None
        back = job.moved(JobState.PENDING, at(3), not_before=at(10))
        await uow.jobs.update(back, JobState.STARTING)
        await uow.commit()
    await view.read(uow_factory)
    assert view.summary() == {kept.id: (0, None), late.id: (0, None), started.id: (1, at(10))}
    await view.read(uow_factory)  # nothing changed: the same view
    assert view.summary() == {kept.id: (0, None), late.id: (0, None), started.id: (1, at(10))}


async def test_a_change_committed_after_a_read_that_it_began_before_is_in_the_next_one(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The race a plain "changed after the last read" watermark loses: a transaction that
    wrote before the read and commits after it."""
    await setup_fleet(uow_factory)
    first, slow = gpu_job(1), gpu_job(1)
    await add(uow_factory, first)
    view = View()
    await view.read(uow_factory)
    async with uow_factory() as writer:
        await writer.jobs.add(slow)  # written, not committed
        await add(uow_factory, gpu_job(1))  # a later transaction commits first
        await view.read(uow_factory)
        assert slow.id not in view.jobs
        await writer.commit()
    await view.read(uow_factory)
    assert slow.id in view.jobs and first.id in view.jobs and len(view.jobs) == 3
