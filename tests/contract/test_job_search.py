"""Contract: the jobs list's text search (``search=``) and a page's progress (``progress``),
the same in the PostgreSQL and in-memory adapters."""

from __future__ import annotations

import pytest

from domain.jobs import Job
from domain.lifecycle import JobState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import a_job, a_spec, an_attempt, at

pytestmark = pytest.mark.contract


async def _store(uow_factory: UnitOfWorkFactory, *jobs: Job) -> None:
    async with uow_factory() as uow:
        for job in jobs:
            await uow.jobs.add(job)
        await uow.commit()


async def _found(uow_factory: UnitOfWorkFactory, text: str, queue: str | None = None) -> set[str]:
    async with uow_factory() as uow:
        page = await uow.jobs.list(
            owner=None, states=None, limit=50, cursor=None, search=text, queue=queue
        )
    return {j.id for j in page.jobs}


async def test_search_matches_experiment_id_owner_literally(
    uow_factory: UnitOfWorkFactory,
) -> None:
    pct = a_job(spec=a_spec(experiment="lr_100%_warm"), owner="carol", created_at=at(1))
    under = a_job(spec=a_spec(experiment="lrX100Ywarm"), owner="carol", created_at=at(2))
    uni = a_job(spec=a_spec(experiment="Über-Modell"), owner="dave", created_at=at(3))
    slash = a_job(spec=a_spec(experiment="a\\b"), owner="erin", created_at=at(4))
    await _store(uow_factory, pct, under, uni, slash)
    # % and _ are characters, not wildcards: "_100%" matches only the job that has them
    assert await _found(uow_factory, "_100%") == {pct.id}
    assert await _found(uow_factory, "%") == {pct.id}
    assert await _found(uow_factory, "_") == {pct.id}
    assert await _found(uow_factory, "\\") == {slash.id}
    assert await _found(uow_factory, "LRX100") == {under.id}  # case-insensitive
    assert await _found(uow_factory, "Über-m") == {uni.id}  # unicode; ASCII letters fold
    assert await _found(uow_factory, "über") == set()  # only ASCII letters fold (any locale)
    assert await _found(uow_factory, "dave") == {uni.id}  # the owner
    assert await _found(uow_factory, pct.id[-6:]) == {pct.id}  # part of the id
    assert await _found(uow_factory, "nothing-like-it") == set()
    # combined with the other filters
    assert await _found(uow_factory, "lr", queue="nope") == set()
    async with uow_factory() as uow:
        only = await uow.jobs.list(
            owner="carol", states=[JobState.PENDING], limit=50, cursor=None, search="warm"
        )
    assert {j.id for j in only.jobs} == {pct.id, under.id}


async def test_search_pages_with_the_cursor(uow_factory: UnitOfWorkFactory) -> None:
    hits = [a_job(spec=a_spec(experiment=f"sweep-{i}"), created_at=at(i)) for i in range(5)]
    other = [a_job(spec=a_spec(experiment=f"other-{i}"), created_at=at(i)) for i in range(5)]
    await _store(uow_factory, *hits, *other)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        async with uow_factory() as uow:
            page = await uow.jobs.list(
                owner=None, states=None, limit=2, cursor=cursor, search="sweep"
            )
        seen += [j.id for j in page.jobs]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [j.id for j in reversed(hits)]


async def test_progress_counts_attempts_and_times(uow_factory: UnitOfWorkFactory) -> None:
    never = a_job(created_at=at(0))
    ran = a_job(created_at=at(0))
    await _store(uow_factory, never, ran)
    async with uow_factory() as uow:
        starting = ran.moved(JobState.STARTING, at(1))
        await uow.jobs.update(starting, JobState.PENDING)
        await uow.attempts.add(an_attempt(ran, 1))
        running = starting.moved(JobState.RUNNING, at(2))
        await uow.jobs.update(running, JobState.STARTING)
        requeued = running.moved(JobState.PENDING, at(5), reason="node lost")
        await uow.jobs.update(requeued, JobState.RUNNING)
        await uow.attempts.add(an_attempt(ran, 2))
        again = requeued.moved(JobState.STARTING, at(6)).moved(JobState.RUNNING, at(7))
        await uow.jobs.update(again, JobState.PENDING)
        await uow.commit()
    async with uow_factory() as uow:
        found = await uow.jobs.progress([never.id, ran.id, "job-unknown"])
    assert set(found) == {never.id, ran.id}
    assert (found[never.id].attempts, found[never.id].started_at) == (0, None)
    assert found[never.id].pending_since == at(0)
    assert found[ran.id].attempts == 2
    assert found[ran.id].started_at == at(2)  # its first start, not the latest
    assert found[ran.id].pending_since == at(5)  # its latest entry into pending
    async with uow_factory() as uow:
        assert await uow.jobs.progress([]) == {}
