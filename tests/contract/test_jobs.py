"""Contract: jobs — compare-and-set, pagination, SKIP LOCKED claims, transaction isolation."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import replace

import pytest

from domain.errors import Conflict, InvalidInput, NotFound
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import a_job, at

pytestmark = pytest.mark.contract


async def _store(uow_factory: UnitOfWorkFactory, *jobs: Job) -> None:
    async with uow_factory() as uow:
        for job in jobs:
            await uow.jobs.add(job)
        await uow.commit()


async def test_add_then_get(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job(reason="queued", exit_code=None)
    await _store(uow_factory, job)
    async with uow_factory() as uow:
        assert await uow.jobs.get(job.id) == job
        assert await uow.jobs.get("job-missing") is None


@pytest.mark.parametrize("same", ["id", "preview_id"])
async def test_duplicate_id_or_preview_is_a_conflict(
    uow_factory: UnitOfWorkFactory, same: str
) -> None:
    job = a_job()
    await _store(uow_factory, job)
    twin = a_job(**{same: getattr(job, same)})
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.jobs.add(twin)


async def test_update_is_compare_and_set(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    await _store(uow_factory, job)
    starting = job.moved(JobState.STARTING, at(1))
    async with uow_factory() as uow:
        await uow.jobs.update(starting, expected=JobState.PENDING)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.jobs.get(job.id) == starting
        with pytest.raises(Conflict):
            await uow.jobs.update(job.moved(JobState.CANCELLED, at(2)), expected=JobState.PENDING)
        with pytest.raises(NotFound):
            await uow.jobs.update(a_job(), expected=JobState.PENDING)
    running = starting.moved(JobState.RUNNING, at(3))
    failed = running.moved(JobState.FAILED, at(4), reason="OOM", exit_code=137)
    async with uow_factory() as uow:
        await uow.jobs.update(running, expected=JobState.STARTING)
        await uow.jobs.update(failed, expected=JobState.RUNNING)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.jobs.get(job.id) == failed


async def test_a_concurrent_update_waits_then_loses(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    await _store(uow_factory, job)

    async def cancel() -> None:
        async with uow_factory() as uow:
            await uow.jobs.update(job.moved(JobState.CANCELLED, at(2)), JobState.PENDING)
            await uow.commit()

    async with uow_factory() as first:
        await first.jobs.update(job.moved(JobState.STARTING, at(1)), JobState.PENDING)
        loser = asyncio.create_task(cancel())
        done, _ = await asyncio.wait({loser}, timeout=0.2)
        assert not done, "the second writer must wait for the first transaction"
        await first.commit()
    with pytest.raises(Conflict):
        await loser
    async with uow_factory() as uow:
        stored = await uow.jobs.get(job.id)
        assert stored is not None and stored.state is JobState.STARTING


async def test_changes_are_invisible_until_commit(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    async with uow_factory() as writer, uow_factory() as reader:
        await writer.jobs.add(job)
        assert await writer.jobs.get(job.id) == job
        assert await reader.jobs.get(job.id) is None
        await writer.commit()
        assert await reader.jobs.get(job.id) == job


async def test_leaving_without_commit_rolls_back(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    async with uow_factory() as uow:
        await uow.jobs.add(job)
    with pytest.raises(RuntimeError):
        async with uow_factory() as uow:
            await uow.jobs.add(replace(job, id="job-other", preview_id="pre-other"))
            raise RuntimeError("boom")
    async with uow_factory() as uow:
        assert await uow.jobs.get(job.id) is None
        assert await uow.jobs.get("job-other") is None
        page = await uow.jobs.list(owner=None, states=None, limit=10, cursor=None)
        assert page.jobs == []


async def test_list_pages_newest_first_with_filters(uow_factory: UnitOfWorkFactory) -> None:
    # 21 jobs, one a minute: bob owns every fourth; states cycle pending/running/succeeded.
    states = [JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED]
    jobs = [
        a_job(
            id=f"job-{i:02d}",
            owner="bob" if i % 4 == 3 else "alice",
            state=states[i % 3],
            created_at=at(i),
        )
        for i in range(21)
    ]
    # Two more at the same instant as job-10: the id breaks the tie.
    jobs += [
        a_job(id=f"job-10{s}", owner="alice", state=JobState.PENDING, created_at=at(10))
        for s in "ab"
    ]
    await _store(uow_factory, *jobs)
    wanted = {JobState.PENDING, JobState.RUNNING}
    expected = [
        "job-18", "job-16", "job-13", "job-12", "job-10b",
        "job-10a", "job-10", "job-09", "job-06", "job-04",
        "job-01", "job-00",
    ]  # fmt: skip

    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    async with uow_factory() as uow:
        while True:
            page = await uow.jobs.list(owner="alice", states=wanted, limit=5, cursor=cursor)
            pages += 1
            assert all(j.owner == "alice" and j.state in wanted for j in page.jobs)
            seen += [j.id for j in page.jobs]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    assert seen == expected
    assert pages == 3


async def test_list_without_filters_and_by_state(uow_factory: UnitOfWorkFactory) -> None:
    jobs = [a_job(created_at=at(i), owner=f"user{i}") for i in range(5)]
    await _store(uow_factory, *jobs)
    async with uow_factory() as uow:
        page = await uow.jobs.list(owner=None, states=None, limit=5, cursor=None)
        assert [j.id for j in page.jobs] == [j.id for j in reversed(jobs)]
        assert page.next_cursor is None
        none = await uow.jobs.list(owner=None, states=[JobState.FAILED], limit=5, cursor=None)
        assert none.jobs == [] and none.next_cursor is None
        empty = await uow.jobs.list(owner=None, states=[], limit=5, cursor=None)
        assert empty.jobs == []


def _forged(doc: str) -> str:
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


T = '"2026-12-07T22:18:18+00:00"'


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor", "", "W10", "WyJ4IiwgMV0",
        # forged: ids PostgreSQL cannot take (a NUL, a lone surrogate), or not our shape
        _forged(f'[{T},"job-\\u0000"]'), _forged(f'[{T},"job-\\ud800"]'),
        _forged(f'[{T},"job-\\u001b[31m"]'), _forged(f'[{T},""]'), _forged(f'[{T},"{"j" * 201}"]'),
        _forged(f'{{{T}: 1, "job-x": 2}}'), _forged(f'[{T},"job-x",3]'), _forged(f"[{T},7]"),
        _forged('"ab"'), _forged('[1,"job-x"]'), _forged('["0001-01-01T00:00:00+14:00","job-x"]'),
        _forged('["2026-12-07T22:18:18","job-x"]'),
    ],
)  # fmt: skip
async def test_a_bad_cursor_is_invalid_input(uow_factory: UnitOfWorkFactory, cursor: str) -> None:
    async with uow_factory() as uow:
        with pytest.raises(InvalidInput) as err:
            await uow.jobs.list(owner=None, states=None, limit=5, cursor=cursor)
    assert err.value.field == "cursor"
    assert "without a cursor" in err.value.fix


async def test_claim_takes_the_oldest_matching_jobs(uow_factory: UnitOfWorkFactory) -> None:
    jobs = [a_job(created_at=at(10 - i)) for i in range(5)]  # the last is the oldest
    running = a_job(created_at=at(-5), state=JobState.RUNNING)
    await _store(uow_factory, *jobs, running)
    async with uow_factory() as uow:
        claimed = await uow.jobs.claim([JobState.PENDING], limit=3)
    assert [j.id for j in claimed] == [jobs[4].id, jobs[3].id, jobs[2].id]


async def test_claim_skips_rows_locked_by_another_unit(uow_factory: UnitOfWorkFactory) -> None:
    jobs = [a_job(created_at=at(i)) for i in range(5)]
    await _store(uow_factory, *jobs)
    async with uow_factory() as a, uow_factory() as b:
        first = await a.jobs.claim([JobState.PENDING], limit=2)
        # A claim that waited for a's locks instead of skipping them would hang: bound it.
        second = await asyncio.wait_for(b.jobs.claim([JobState.PENDING], limit=10), 10)
        assert [j.id for j in first] == [jobs[0].id, jobs[1].id]
        assert [j.id for j in second] == [j.id for j in jobs[2:]]
    # Both ended without commit: the locks are gone and everything is claimable again.
    async with uow_factory() as c:
        assert len(await c.jobs.claim([JobState.PENDING], limit=10)) == 5


async def test_claimed_and_moved_jobs_leave_the_queue(uow_factory: UnitOfWorkFactory) -> None:
    jobs = [a_job(created_at=at(i)) for i in range(3)]
    await _store(uow_factory, *jobs)
    async with uow_factory() as uow:
        for job in await uow.jobs.claim([JobState.PENDING], limit=2):
            await uow.jobs.update(job.moved(JobState.STARTING, at(9)), JobState.PENDING)
        await uow.commit()
    async with uow_factory() as uow:
        left = await uow.jobs.claim([JobState.PENDING], limit=10)
        assert [j.id for j in left] == [jobs[2].id]
        starting = await uow.jobs.claim([JobState.STARTING], limit=10)
        assert [j.id for j in starting] == [jobs[0].id, jobs[1].id]
