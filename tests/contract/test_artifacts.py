"""Contract: a member's artifact manifest is recorded once (the first stays), read back by
job in attempt and member order, and needs its member."""

from __future__ import annotations

import pytest

from domain.artifacts import ArtifactFile, ArtifactRecord, Manifest
from domain.errors import NotFound
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import a_job, a_member, an_attempt, at

pytestmark = pytest.mark.contract


def manifest(*names: str) -> Manifest:
    return Manifest.of([ArtifactFile(n, len(n), "ab" * 32) for n in names])


async def test_manifests_are_recorded_once_and_come_back_in_order(
    uow_factory: UnitOfWorkFactory,
) -> None:
    job, other = a_job(), a_job()
    first, second = an_attempt(job, 1), an_attempt(job, 2)
    members = [a_member(first, 1), a_member(first, 0), a_member(second, 0)]
    elsewhere = an_attempt(other, 1)
    stranger = a_member(elsewhere, 0)
    async with uow_factory() as uow:
        for j in (job, other):
            await uow.jobs.add(j)
        for a in (first, second, elsewhere):
            await uow.attempts.add(a)
        for m in (*members, stranger):
            await uow.members.add(m)
        await uow.commit()
    records = [
        ArtifactRecord(
            m.id, job.id, m.attempt_id, n, m.index, manifest(f"ckpt-{i}.pt", "log"), at(i)
        )
        for i, (m, n) in enumerate(zip(members, (1, 1, 2), strict=True))
    ]
    async with uow_factory() as uow:
        for r in reversed(records):
            assert await uow.artifacts.record(r)
        await uow.artifacts.record(
            ArtifactRecord(stranger.id, other.id, stranger.attempt_id, 1, 0, manifest("x"), at(9))
        )
        await uow.commit()
    again = ArtifactRecord(members[0].id, job.id, first.id, 1, 1, manifest("changed"), at(20))
    async with uow_factory() as uow:
        assert not await uow.artifacts.record(again)  # the first manifest stays
        await uow.commit()
    async with uow_factory() as uow:
        got = await uow.artifacts.for_job(job.id)
    assert [(r.attempt, r.member_index) for r in got] == [(1, 0), (1, 1), (2, 0)]
    assert got[1].manifest == records[0].manifest and got[1].manifest.digest.startswith("sha256:")
    assert got[0].recorded_at == at(1)


async def test_a_manifest_needs_its_member(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        with pytest.raises(NotFound):
            await uow.artifacts.record(
                ArtifactRecord("mem-missing", job.id, "att-x", 1, 0, manifest("a"), at(1))
            )


async def test_the_node_holding_the_files_is_recorded(uow_factory: UnitOfWorkFactory) -> None:
    job = a_job()
    attempt = an_attempt(job, 1)
    members = [a_member(attempt, 0), a_member(attempt, 1)]
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        for m in members:
            await uow.members.add(m)
        for m, node in zip(members, ("gpu-a-01", None), strict=True):
            await uow.artifacts.record(
                ArtifactRecord(m.id, job.id, attempt.id, 1, m.index, manifest("w"), at(1), node)
            )
        await uow.commit()
    async with uow_factory() as uow:
        assert [r.node for r in await uow.artifacts.for_job(job.id)] == ["gpu-a-01", None]
