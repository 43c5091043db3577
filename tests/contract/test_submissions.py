"""Contract: previews and the submission ledger (idempotent commit)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from domain.errors import Conflict
from domain.jobs import Submission
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import a_job, a_preview, a_submission, an_intent, at, new_id

pytestmark = pytest.mark.contract


async def test_preview_round_trips_every_field(uow_factory: UnitOfWorkFactory) -> None:
    preview = a_preview(intent=an_intent(source=None, runtime=None, params={"x": 1.5}))
    async with uow_factory() as uow:
        await uow.previews.add(preview)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.previews.get(preview.id) == preview
        assert await uow.previews.get("pre-missing") is None


async def test_preview_with_source_round_trips(uow_factory: UnitOfWorkFactory) -> None:
    preview = a_preview()
    assert preview.intent.source is not None and preview.spec.source is not None
    async with uow_factory() as uow:
        await uow.previews.add(preview)
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.previews.get(preview.id)
    assert stored == preview
    assert stored is not None and stored.spec.command == preview.spec.command


async def test_preview_ids_are_unique(uow_factory: UnitOfWorkFactory) -> None:
    preview = a_preview()
    async with uow_factory() as uow:
        await uow.previews.add(preview)
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.previews.add(replace(preview, owner="bob"))


async def test_first_claim_records_and_returns_none(uow_factory: UnitOfWorkFactory) -> None:
    sub = a_submission()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(sub) is None
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(sub) == sub


async def test_same_retry_key_returns_the_stored_row(uow_factory: UnitOfWorkFactory) -> None:
    first = a_submission(retry_key="rk-same")
    async with uow_factory() as uow:
        assert await uow.submissions.claim(first) is None
        await uow.commit()
    other_preview = a_submission(retry_key="rk-same", digest="sha256:" + "d" * 64)
    async with uow_factory() as uow:
        assert await uow.submissions.claim(other_preview) == first


async def test_a_retry_key_is_its_owners(uow_factory: UnitOfWorkFactory) -> None:
    """Two users with one retry key: each claim records its own row, and each user's replay
    returns their own row, never the other's."""
    alice = a_submission(retry_key="rk-shared", owner="alice")
    bob = a_submission(retry_key="rk-shared", owner="bob")
    for sub in (alice, bob):
        async with uow_factory() as uow:
            assert await uow.submissions.claim(sub) is None
            await uow.commit()
    for sub in (alice, bob):
        async with uow_factory() as uow:
            again = replace(sub, preview_id=new_id("pre"), job_id=new_id("job"))
            assert await uow.submissions.claim(again) == sub


async def test_concurrent_claims_of_one_key_by_two_users_record_one_row_each(
    uow_factory: UnitOfWorkFactory,
) -> None:
    previews = {"alice": new_id("pre"), "bob": new_id("pre")}
    claims = [
        a_submission(retry_key="rk-race", owner=o, preview_id=previews[o], job_id=f"job-r{i}")
        for i, o in enumerate(["alice", "bob"] * 20)
    ]
    results = await asyncio.gather(*(_commit_once(uow_factory, s) for s in claims))
    winners = {sub.owner: sub for sub, existing in results if existing is None}
    assert sorted(winners) == ["alice", "bob"] and len(winners) == 2
    assert sum(existing is None for _, existing in results) == 2
    for sub, existing in results:
        assert existing is None or existing == winners[sub.owner]


async def test_other_retry_key_for_a_claimed_preview_returns_that_row(
    uow_factory: UnitOfWorkFactory,
) -> None:
    first = a_submission(preview_id="pre-shared")
    async with uow_factory() as uow:
        assert await uow.submissions.claim(first) is None
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(a_submission(preview_id="pre-shared")) == first


async def test_a_reused_job_id_is_a_conflict(uow_factory: UnitOfWorkFactory) -> None:
    first = a_submission()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(first) is None
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(Conflict):
            await uow.submissions.claim(a_submission(job_id=first.job_id))


async def test_a_rolled_back_claim_leaves_nothing(uow_factory: UnitOfWorkFactory) -> None:
    sub = a_submission()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(sub) is None
    later = replace(sub, job_id=new_id("job"), created_at=at(5))
    async with uow_factory() as uow:
        assert await uow.submissions.claim(later) is None
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.submissions.claim(sub) == later


async def _commit_once(
    uow_factory: UnitOfWorkFactory, sub: Submission
) -> tuple[Submission, Submission | None]:
    async with uow_factory() as uow:
        existing = await uow.submissions.claim(sub)
        if existing is None:
            await uow.jobs.add(a_job(id=sub.job_id, preview_id=sub.preview_id))
            await uow.commit()
        return sub, existing


@pytest.mark.parametrize("keys", [1, 2], ids=["one-retry-key", "two-retry-keys"])
async def test_concurrent_claims_record_exactly_one_row(
    uow_factory: UnitOfWorkFactory, keys: int
) -> None:
    preview = a_preview()
    async with uow_factory() as uow:
        await uow.previews.add(preview)
        await uow.commit()
    retry_keys = [new_id("rk") for _ in range(keys)]
    claims = [
        a_submission(retry_key=retry_keys[i % keys], preview_id=preview.id, job_id=f"job-c{i}")
        for i in range(50)
    ]
    results = await asyncio.gather(*(_commit_once(uow_factory, s) for s in claims))

    winners = [sub for sub, existing in results if existing is None]
    assert len(winners) == 1
    winner = winners[0]
    assert {existing for _, existing in results if existing is not None} == {winner}
    async with uow_factory() as uow:
        job = await uow.jobs.get(winner.job_id)
        assert job is not None and job.preview_id == preview.id
        for sub, _ in results:
            if sub is not winner:
                assert await uow.jobs.get(sub.job_id) is None
