"""Contract: recorded checkpoints (``uow.checkpoints``) on both adapters: recorded once per job,
attempt and name, listed by attempt then name, forgotten one by one, gone with their job; and
their files' blobs are referred to (kept from collection) while they are recorded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import Checkpoint
from domain.errors import NotFound
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import T0, a_job

pytestmark = pytest.mark.contract


def a_checkpoint(job_id: str, attempt: int, name: str, n: int, step: int | None = 1) -> Checkpoint:
    files = Manifest.of(
        [ArtifactFile("w.bin", 4, f"{n:064x}"), ArtifactFile("COMPLETE", 0, "0" * 64)]
    )
    return Checkpoint(job_id, attempt, name, step, files, T0)


async def test_checkpoints_are_recorded_once_listed_and_dropped(
    uow_factory: UnitOfWorkFactory,
) -> None:
    job = a_job()
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        await uow.commit()
    b, a, c = (
        a_checkpoint(job.id, 2, "checkpoint-1", 1),
        a_checkpoint(job.id, 1, "checkpoint-9", 2, step=None),
        a_checkpoint(job.id, 2, "checkpoint-0", 3, step=2**62),
    )
    async with uow_factory() as uow:
        assert all([await uow.checkpoints.record(x) for x in (b, a, c)])
        assert not await uow.checkpoints.record(replace(b, step=5))  # the first one stays
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checkpoints.for_job(job.id) == [a, c, b]
        assert await uow.checkpoints.for_job("job-other") == []
        refs = await uow.blob_refs.referenced([f"sha256:{n:064x}" for n in (1, 2, 3, 4)], T0)
        assert refs == {f"sha256:{n:064x}" for n in (1, 2, 3)}
        await uow.checkpoints.drop(job.id, 2, "checkpoint-1")
        await uow.checkpoints.drop(job.id, 2, "no-such")  # nothing to forget: no error
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checkpoints.for_job(job.id) == [a, c]
        assert await uow.blob_refs.referenced([f"sha256:{1:064x}"], T0) == set()


async def test_a_checkpoint_of_a_job_that_does_not_exist_is_refused(
    uow_factory: UnitOfWorkFactory,
) -> None:
    with pytest.raises(NotFound):
        async with uow_factory() as uow:
            await uow.checkpoints.record(a_checkpoint("job-none", 1, "c", 1))
            await uow.commit()


async def test_a_checkpoint_kept_in_place_names_no_blobs(uow_factory: UnitOfWorkFactory) -> None:
    """Its files stay in their directory (Slurm's shared directory), not in the blob store: its
    manifest's digests keep nothing from blob collection (none of them is a blob of its)."""
    job = a_job()
    in_place = replace(a_checkpoint(job.id, 1, "checkpoint-1", 7), kept_in="/shared/c/1/x")
    in_store = a_checkpoint(job.id, 1, "checkpoint-2", 8)
    async with uow_factory() as uow:
        await uow.jobs.add(job)
        assert await uow.checkpoints.record(in_place) and await uow.checkpoints.record(in_store)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checkpoints.for_job(job.id) == [in_place, in_store]
        refs = await uow.blob_refs.referenced([f"sha256:{n:064x}" for n in (7, 8)], T0)
        assert refs == {f"sha256:{8:064x}"}
