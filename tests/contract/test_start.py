"""Contract: SchedulingRepository.start — a batch of placements stored whole, pending jobs only."""

from __future__ import annotations

import pytest

from domain.admission import Reservation
from domain.errors import Conflict
from domain.jobs import Job, Member
from domain.lifecycle import JobState, MemberState
from domain.ports import Start
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import an_attempt, at
from tests.contract.test_reservations import gpu_job, on, setup_fleet

pytestmark = pytest.mark.contract


def start_of(job: Job, node: str, *gpus: int, number: int = 1) -> Start:
    attempt = an_attempt(job, number)
    member = Member(f"mem-{attempt.id}", attempt.id, 0, MemberState.PENDING, at(1), node=node)
    reservation = Reservation(attempt.id, job.id, "default", (on(node, *gpus),), at(1))
    return Start(job.id, attempt, (member,), reservation)


async def test_start_stores_pending_jobs_and_skips_the_others(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    pending, cancelled = gpu_job(2), gpu_job(2, state=JobState.CANCELLED)
    async with uow_factory() as uow:
        await uow.jobs.add(pending)
        await uow.jobs.add(cancelled)
        await uow.commit()
    starts = [start_of(pending, "a-0", 0, 1), start_of(cancelled, "a-0", 2, 3)]
    async with uow_factory() as uow:
        assert await uow.scheduling.start(starts, at(2)) == [pending.id]
        await uow.commit()
    async with uow_factory() as uow:
        job = await uow.jobs.get(pending.id)
        assert job is not None and (job.state, job.updated_at) == (JobState.STARTING, at(2))
        [attempt] = await uow.attempts.for_job(pending.id)
        assert [(m.node, m.state) for m in await uow.members.for_attempt(attempt.id)] == [
            ("a-0", MemberState.PENDING)
        ]
        assert [r.job_id for r in await uow.reservations.live()] == [pending.id]
        assert await uow.attempts.for_job(cancelled.id) == []
        snap = await uow.scheduling.snapshot(10)
        assert snap.pending == []


async def test_a_double_booked_gpu_in_a_batch_is_a_conflict_and_nothing_stays(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    one, two = gpu_job(1), gpu_job(1)
    async with uow_factory() as uow:
        await uow.jobs.add(one)
        await uow.jobs.add(two)
        await uow.commit()
    with pytest.raises(Conflict):
        async with uow_factory() as uow:
            await uow.scheduling.start([start_of(one, "a-0", 0), start_of(two, "a-0", 0)], at(2))
    async with uow_factory() as uow:
        jobs = [await uow.jobs.get(one.id), await uow.jobs.get(two.id)]
        assert [None if j is None else j.state for j in jobs] == [
            JobState.PENDING,
            JobState.PENDING,
        ]
        assert await uow.reservations.live() == []
        assert [p.attempts for p in (await uow.scheduling.snapshot(10)).pending] == [0, 0]


async def test_a_gpu_listed_twice_is_refused_before_the_database_and_nothing_stays(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The reservations' parameters are encoded while the jobs statement runs (PostgreSQL); an
    encoding that refuses the batch still refuses it, with its reason, and the jobs stay
    pending."""
    await setup_fleet(uow_factory)
    one, two = gpu_job(1), gpu_job(2)
    async with uow_factory() as uow:
        await uow.jobs.add(one)
        await uow.jobs.add(two)
        await uow.commit()
    with pytest.raises(Conflict):
        async with uow_factory() as uow:
            starts = [start_of(one, "a-0", 0), start_of(two, "a-0", 3, 3)]
            await uow.scheduling.start(starts, at(2))
    async with uow_factory() as uow:
        assert [(await uow.jobs.get(j.id)).state for j in (one, two)] == [  # type: ignore[union-attr]
            JobState.PENDING,
            JobState.PENDING,
        ]
        assert await uow.reservations.live() == []


async def test_the_snapshot_counts_earlier_attempts(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    job = gpu_job(1)
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(an_attempt(job, 1))
        await uow.commit()
    async with uow_factory() as uow:
        [pending] = (await uow.scheduling.snapshot(10)).pending
        assert pending.attempts == 1
        with pytest.raises(Conflict):  # number 1 is taken
            await uow.scheduling.start([start_of(job, "a-0", 0, number=1)], at(2))


async def test_a_started_job_drops_the_reason_it_waited_with(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """A reason belongs to its state (issue 18, 14): "… queued again" explains ``pending``."""
    await setup_fleet(uow_factory)
    job = gpu_job(1, reason="attempt 1 launch aborted: a node was silent; queued again")
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.scheduling.start([start_of(job, "a-0", 0, number=2)], at(2)) == [job.id]
        await uow.commit()
    async with uow_factory() as uow:
        started = await uow.jobs.get(job.id)
        assert started is not None and (started.state, started.reason) == (JobState.STARTING, "")
        [*_, event] = await uow.jobs.events(job.id, 10)
        assert (event.state, event.reason) == (JobState.STARTING, "")
