"""Contract: the job timeline — every state transition recorded with its time and reason, in
the transaction that made it (the repository's update and the scheduler's batch start alike),
and the queue filter of JobRepository.list."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from domain.errors import InvalidInput
from domain.jobs import Job, JobEvent
from domain.lifecycle import JobState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import a_job, a_spec, at
from tests.contract.test_reservations import gpu_job, setup_fleet
from tests.contract.test_start import start_of

pytestmark = pytest.mark.contract


async def _add(uow_factory: UnitOfWorkFactory, *jobs: Job) -> None:
    async with uow_factory() as uow:
        for job in jobs:
            await uow.jobs.add(job)
        await uow.commit()


def _timeline(events: list[JobEvent]) -> list[tuple[int, datetime, str, str]]:
    return [(e.seq, e.at, e.state.value, e.reason) for e in events]


async def test_each_transition_is_an_event_with_time_and_reason(
    uow_factory: UnitOfWorkFactory,
) -> None:
    job = a_job(reason="queued")
    await _add(uow_factory, job)
    starting = job.moved(JobState.STARTING, at(1))
    running = starting.moved(JobState.RUNNING, at(2))
    failed = running.moved(JobState.FAILED, at(3), reason="OOM", exit_code=137)
    async with uow_factory() as uow:
        await uow.jobs.update(starting, JobState.PENDING)
        await uow.jobs.update(running, JobState.STARTING)
        await uow.jobs.update(failed, JobState.RUNNING)
        await uow.commit()
    async with uow_factory() as uow:
        events = await uow.jobs.events(job.id, 100)
        assert _timeline(events) == [
            (1, at(0), "pending", "queued"),
            (2, at(1), "starting", ""),  # the reason did not change
            (3, at(2), "running", ""),
            (4, at(3), "failed", "OOM"),
        ]
        assert all(e.job_id == job.id for e in events)
        assert _timeline(await uow.jobs.events(job.id, 2)) == _timeline(events[:2])
        assert await uow.jobs.events("job-missing", 10) == []
        with pytest.raises(InvalidInput):
            await uow.jobs.events(job.id, 0)


async def test_an_update_without_a_state_change_records_nothing(
    uow_factory: UnitOfWorkFactory,
) -> None:
    job = a_job(state=JobState.RUNNING)
    await _add(uow_factory, job)
    async with uow_factory() as uow:
        await uow.jobs.update(replace(job, reason="still going", updated_at=at(5)), job.state)
        await uow.commit()
    async with uow_factory() as uow:
        assert [e.state for e in await uow.jobs.events(job.id, 10)] == [JobState.RUNNING]


async def test_a_rolled_back_transition_leaves_no_event(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    await _add(uow_factory, job)
    async with uow_factory() as uow:
        await uow.jobs.update(job.moved(JobState.CANCELLED, at(1)), JobState.PENDING)
        assert len(await uow.jobs.events(job.id, 10)) == 2  # visible to its own transaction
        # leaving without commit() rolls back
    async with uow_factory() as uow:
        assert _timeline(await uow.jobs.events(job.id, 10)) == [(1, at(0), "pending", "")]


async def test_the_schedulers_batch_start_records_the_move(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    job = gpu_job(1)
    await _add(uow_factory, job)
    async with uow_factory() as uow:
        assert await uow.scheduling.start([start_of(job, "a-0", 0)], at(2)) == [job.id]
        await uow.commit()
    async with uow_factory() as uow:
        assert [(e.seq, e.at, e.state) for e in await uow.jobs.events(job.id, 10)] == [
            (1, job.created_at, JobState.PENDING),
            (2, at(2), JobState.STARTING),
        ]


async def test_list_filters_by_queue_and_pages(uow_factory: UnitOfWorkFactory) -> None:
    spec_a, spec_b = a_spec(queue="qa"), a_spec(queue="qb")
    in_a = [a_job(spec=spec_a, created_at=at(i)) for i in range(5)]
    in_b = [a_job(spec=spec_b, created_at=at(10 + i), owner="bob") for i in range(2)]
    await _add(uow_factory, *in_a, *in_b)
    seen: list[str] = []
    cursor = None
    async with uow_factory() as uow:
        for _ in range(5):
            page = await uow.jobs.list(owner=None, states=None, limit=2, cursor=cursor, queue="qa")
            seen += [j.id for j in page.jobs]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == [j.id for j in reversed(in_a)]
        only_bob = await uow.jobs.list(owner="bob", states=None, limit=10, cursor=None, queue="qb")
        assert [j.id for j in only_bob.jobs] == [j.id for j in reversed(in_b)]
        none = await uow.jobs.list(owner="bob", states=None, limit=10, cursor=None, queue="qa")
        assert none.jobs == [] and none.next_cursor is None
