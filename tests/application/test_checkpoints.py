"""Checkpoints across attempts on a backend whose members mount this host's directories
(application/checkpoints.py over FilesystemCheckpoints, the in-memory adapters and the
filesystem blob store): what an attempt marked complete is harvested into the blob store and
recorded, the last two are kept, and the next attempt resumes from the newest one that reads
back intact, skipping one whose blob was damaged."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from adapters.blobs import FilesystemBlobStore
from adapters.checkpoint_dirs import FilesystemCheckpoints
from adapters.memory.backend import MemoryBackend
from application import jobs, submissions
from application.checkpoints import for_launch, harvest, sweep
from application.context import Context
from application.explain import explain_job
from application.supervisor import Supervisor
from domain.capsule import StorageCapabilities
from domain.checkpoints import Resume
from domain.lifecycle import JobState
from domain.retry import RetryPolicy
from tests.contract.builders import a_job
from tests.support.checkpoint_tricks import SwappedAfterListing
from tests.support.context import ALICE, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
T = TypeVar("T")


@pytest.fixture
async def ctx(tmp_path: Path) -> Context:
    ctx = memory_context(tmp_path)
    async with ctx.uow() as uow:
        await uow.jobs.add(a_job(id="job-1"))
        await uow.commit()
    return ctx


def write(work: str, name: str, files: dict[str, bytes], marker: str | None = "") -> None:
    root = Path(work) / name
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    root.mkdir(parents=True, exist_ok=True)
    if marker is not None:
        (root / "COMPLETE").write_text(marker)


class Counting(FilesystemBlobStore):
    """The filesystem store, saying which checkpoint each file it stores comes from."""

    def __init__(self, root: Path, hashed: list[str]) -> None:
        super().__init__(root)
        self.hashed = hashed

    async def put_file(
        self, path: str, max_size: int, beneath: str | None = None
    ) -> tuple[str, int]:
        self.hashed.append(Path(path).parent.name)
        return await super().put_file(path, max_size, beneath)


async def running_ended_and_gone(
    ctx: Context, launch: Callable[[str], Awaitable[T]]
) -> tuple[T, T, T]:
    """The first attempts of a running job (job-2), an ended one (job-3) and one whose job is
    gone from the database (job-9), launched by ``launch``."""
    async with ctx.uow() as uow:
        await uow.jobs.add(a_job(id="job-2", state=JobState.RUNNING))
        await uow.jobs.add(a_job(id="job-3", state=JobState.SUCCEEDED))
        await uow.commit()
    return await launch("job-2"), await launch("job-3"), await launch("job-9")


def gone(path: str | Path) -> bool:
    return not Path(path).exists()


async def test_complete_checkpoints_are_harvested_kept_two_and_resumed_from(
    ctx: Context, tmp_path: Path
) -> None:
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    first = await for_launch(ctx, storage, "job-1", 1)
    assert first.resume is None and not gone(first.work)
    write(first.work, "checkpoint-100", {"w.bin": b"a" * 10}, "100")
    write(first.work, "checkpoint-200", {"w.bin": b"b" * 10, "opt/s.bin": b"s"}, "200\n")
    write(first.work, "checkpoint-300", {"w.bin": b"c" * 10})  # its name gives the step
    write(first.work, "checkpoint-400", {"w.bin": b"d"}, marker=None)  # cut short: not complete
    write(first.work, "..bad", {"w.bin": b"e"})  # not a plain name: never resumed from
    (Path(first.work) / "checkpoint-500").mkdir()
    (Path(first.work) / "checkpoint-500" / "COMPLETE").symlink_to("/etc/hostname")  # a trick

    second = await for_launch(ctx, storage, "job-1", 2)
    async with ctx.uow() as uow:
        kept = await uow.checkpoints.for_job("job-1")
    assert [(c.name, c.step) for c in kept] == [("checkpoint-200", 200), ("checkpoint-300", 300)]
    assert {f.path for f in kept[0].manifest.files} == {"COMPLETE", "w.bin", "opt/s.bin"}
    assert gone(first.work)  # harvested: attempt 1's directory is gone
    assert second.resume == "checkpoint-300" and not second.skipped
    resumed = Path(second.resume_root) / "checkpoint-300"
    assert (resumed / "w.bin").read_bytes() == b"c" * 10
    again = await for_launch(ctx, storage, "job-1", 2)  # a launch repeated after a crash
    assert again == second
    assert await harvest(ctx, storage, "job-1", 1) == 0  # nothing left to record


async def test_a_checkpoint_whose_blob_was_damaged_is_skipped_for_the_one_before(
    ctx: Context, tmp_path: Path
) -> None:
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {"w.bin": b"good"}, "1")
    write(first.work, "checkpoint-2", {"w.bin": b"newer"}, "2")
    assert await harvest(ctx, storage, "job-1", 1) == 2
    async with ctx.uow() as uow:
        newest = (await uow.checkpoints.for_job("job-1"))[-1]
    assert newest.name == "checkpoint-2"
    damaged = next(f for f in newest.manifest.files if f.path == "w.bin")
    blob = next((tmp_path / "blobs").rglob(damaged.sha256))
    blob.write_bytes(b"tampered")  # the store refuses it: its digest no longer matches
    second = await for_launch(ctx, storage, "job-1", 2)
    assert second.resume == "checkpoint-1"
    assert (
        len(second.skipped) == 1
        and "checkpoint-2 of attempt 1 skipped: w.bin" in (second.skipped[0])
    )
    assert gone(Path(second.resume_root) / "checkpoint-2")
    assert (Path(second.resume_root) / "checkpoint-1" / "w.bin").read_bytes() == b"good"


async def test_no_blob_store_means_no_checkpoints_from_this_host(ctx: Context) -> None:
    from domain.capsule import StorageCapabilities

    class Local:
        name = "local"
        storage = StorageCapabilities(capsule=True, shared_outputs=True)

    storage = FilesystemCheckpoints(Path("/nonexistent"))
    with_store = dataclasses.replace(ctx, checkpoints=storage)
    assert with_store.checkpoints_of(Local()) is storage  # type: ignore[arg-type]
    assert dataclasses.replace(with_store, blobs=None).checkpoints_of(Local()) is None  # type: ignore[arg-type]


async def test_a_sweep_keeps_the_checkpoints_of_jobs_that_ended_and_removes_their_directories(
    ctx: Context, tmp_path: Path
) -> None:
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    running, ended, orphan = await running_ended_and_gone(
        ctx, lambda job: for_launch(ctx, storage, job, 1)
    )
    for launched in (running, ended, orphan):
        write(launched.work, "checkpoint-5", {"w.bin": b"w"}, "5")
    assert await sweep(ctx, storage) == 2  # job-3's attempt and job-9's
    async with ctx.uow() as uow:
        assert [c.name for c in await uow.checkpoints.for_job("job-3")] == ["checkpoint-5"]
        # kept while it runs (docs/checkpoints.md#harvested-while-the-attempt-runs)
        assert [c.name for c in await uow.checkpoints.for_job("job-2")] == ["checkpoint-5"]
    assert not gone(running.work)  # a running attempt's directory is never removed
    assert gone(ended.work) and gone(orphan.work) and gone(tmp_path / "checkpoints" / "job-3")


async def test_the_supervisor_records_what_each_attempt_resumed_from_and_what_it_skipped(
    tmp_path: Path,
) -> None:
    """Attempt 1 writes two checkpoints and fails; the newer one's blob is damaged once kept.
    Attempt 2, retried by the policy, resumes from the older: the attempt records its name,
    step and writer, and the skipped one with why; later updates of the attempt (running,
    succeeded) keep it; `tp job why` and the job's details say it."""
    backend = MemoryBackend(storage=StorageCapabilities(capsule=True, shared_outputs=True))
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    clock = FakeClock()
    ctx = dataclasses.replace(memory_context(tmp_path, backend, clock), checkpoints=storage)
    policy = RetryPolicy.parse({"max_attempts": 2, "on": ["failed"], "backoff_seconds": 0})
    preview = await submissions.create_preview(
        ctx, ALICE, an_intent(params={"command": "train"}, retry=policy)
    )
    job_id = (
        await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    ).job_id
    sup = Supervisor(ctx, sweep_every=10_000)  # no sweep of ended jobs after the first tick

    await sup.tick()
    if sup._keeping is not None:  # the first tick's keeping, before anything was written
        await sup._keeping
    first = (await jobs.get_job(ctx, ALICE, job_id)).attempts[0]
    assert first.attempt.resume is None  # a first attempt: nothing to say
    handle = first.members[0].handle
    assert handle is not None
    work = backend.members[handle].request.checkpoints
    assert work is not None
    write(work, "checkpoint-100", {"w.bin": b"older"}, "100")
    write(work, "checkpoint-200", {"w.bin": b"newer"}, "200")
    clock.advance(seconds=ctx.limits.checkpoint_harvest.total_seconds())
    await sup.tick()  # the supervisor keeps a running attempt's checkpoints, beside its ticks
    assert sup._keeping is not None
    await sup._keeping
    async with ctx.uow() as uow:
        found = await uow.checkpoints.for_job(job_id)
    assert sorted(c.step or 0 for c in found) == [100, 200]
    newer = next(c for c in found if c.step == 200)
    damaged = next(f for f in newer.manifest.files if f.path == "w.bin")
    next((tmp_path / "blobs").rglob(damaged.sha256)).write_bytes(b"tampered")
    backend.finish(handle, 1)
    await sup.tick()  # attempt 1 failed: the policy queues the job again, no backoff
    await sup.tick()  # attempt 2: reserved, launched, observed running

    d = await jobs.get_job(ctx, ALICE, job_id)
    assert len(d.attempts) == 2 and d.job.state is JobState.RUNNING
    second = d.attempts[1]
    assert second.attempt.state == "running"  # updated after the note: the note is kept
    resume = second.attempt.resume
    assert resume is not None
    assert (resume.name, resume.attempt, resume.step) == ("checkpoint-100", 1, 100)
    assert len(resume.skipped) == 1
    assert resume.skipped[0].startswith("checkpoint-200 of attempt 1 skipped: w.bin: ")
    assert backend.members[second.members[0].handle or ""].request.resume == "checkpoint-100"

    backend.finish(second.members[0].handle or "", 0)
    await sup.tick()
    why = await explain_job(ctx, ALICE, job_id)
    assert why.kind == "finished"
    assert why.checkpoints == (
        "attempt 2 resumed from checkpoint-100 (step 100, written by attempt 1)",
        resume.skipped[0],
    )
    ended = (await jobs.get_job(ctx, ALICE, job_id)).attempts[1].attempt
    assert ended.state == "succeeded" and ended.resume == resume


def test_what_an_attempt_started_from_in_words() -> None:
    skipped = ("checkpoint-300 of attempt 1 skipped: model.bin: digest mismatch",)
    assert Resume("checkpoint-200", 1, 200, skipped).words(2) == [
        "attempt 2 resumed from checkpoint-200 (step 200, written by attempt 1)",
        skipped[0],
    ]
    assert Resume("final", 2).words(3) == ["attempt 3 resumed from final (written by attempt 2)"]
    assert Resume(None, skipped=skipped).words(2)[0] == (
        "attempt 2 started from the beginning: no checkpoint verified"
    )
    assert Resume().words(2) == ["attempt 2 started from the beginning: no checkpoint was recorded"]
    for r in (Resume("checkpoint-200", 1, 200, skipped), Resume()):
        assert Resume.from_dict(r.to_dict()) == r


async def test_a_running_attempts_checkpoints_are_kept_as_they_complete_hashing_only_new_ones(
    ctx: Context, tmp_path: Path
) -> None:
    """The sweep harvests a running job's attempt: a checkpoint is taken once its COMPLETE is
    written, never before; of many saves only the newest two are read (the rest would be
    collected at once); a second sweep reads nothing; the directory stays in place."""
    hashed: list[str] = []

    ctx = dataclasses.replace(ctx, blobs=Counting(tmp_path / "blobs", hashed))
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    async with ctx.uow() as uow:
        await uow.jobs.add(a_job(id="job-2", state=JobState.RUNNING))
        await uow.commit()
    running = await for_launch(ctx, storage, "job-2", 1)
    for step in (100, 200, 300, 400):
        write(running.work, f"checkpoint-{step}", {"w.bin": b"w" * step}, str(step))
    write(running.work, "checkpoint-500", {"w.bin": b"being written"}, marker=None)

    async def recorded() -> list[str]:
        async with ctx.uow() as uow:
            return sorted(c.name for c in await uow.checkpoints.for_job("job-2"))

    assert await sweep(ctx, storage) == 0  # nothing removed
    assert await recorded() == ["checkpoint-300", "checkpoint-400"]
    assert sorted(set(hashed)) == ["checkpoint-300", "checkpoint-400"]  # 100, 200 never read
    hashed.clear()
    assert await sweep(ctx, storage) == 0
    assert hashed == [] and await recorded() == ["checkpoint-300", "checkpoint-400"]
    (Path(running.work) / "checkpoint-500" / "COMPLETE").write_text("500")  # now complete
    assert await sweep(ctx, storage) == 0
    assert sorted(set(hashed)) == ["checkpoint-500"]
    assert await recorded() == ["checkpoint-400", "checkpoint-500"]
    assert not gone(Path(running.work) / "checkpoint-100")  # the workload's own, untouched

    async with ctx.uow() as uow:  # the job ends: the next sweep keeps it and removes it all
        job = await uow.jobs.get("job-2")
        assert job is not None
        await uow.jobs.update(dataclasses.replace(job, state=JobState.SUCCEEDED), job.state)
        await uow.commit()
    hashed.clear()
    assert await sweep(ctx, storage) == 1 and hashed == [] and gone(running.work)


async def test_a_launch_and_the_keeping_harvesting_one_attempt_at_once_hash_its_files_once(
    ctx: Context, tmp_path: Path
) -> None:
    hashed: list[str] = []

    ctx = dataclasses.replace(ctx, blobs=Counting(tmp_path / "blobs", hashed))
    storage = FilesystemCheckpoints(tmp_path / "checkpoints")
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {"a.bin": b"a", "b.bin": b"b"}, "1")
    done = await asyncio.gather(*(harvest(ctx, storage, "job-1", 1) for _ in range(2)))
    assert sorted(done) == [0, 1]  # one recorded it, the other found it recorded
    assert sorted(hashed) == ["checkpoint-1"] * 3  # a.bin, b.bin and COMPLETE, once each


async def test_a_directory_swapped_for_a_link_after_the_listing_is_never_harvested(
    ctx: Context, tmp_path: Path
) -> None:
    """A running workload swaps a listed checkpoint's directory for a link to a host directory
    holding files of the same names (say, the control plane's state): nothing of the host is
    read into the blob store, and the checkpoint is not recorded."""
    host = tmp_path / "host-secrets"
    host.mkdir()
    (host / "key.pem").write_bytes(b"the control plane's key")
    (host / "COMPLETE").write_bytes(b"1")
    storage = SwappedAfterListing(tmp_path / "checkpoints", host)
    work, _ = await storage.prepare("job-1", 1)
    write(work, "checkpoint-1", {"key.pem": b"the workload's"}, "1")
    assert await harvest(ctx, storage, "job-1", 1) == 0
    async with ctx.uow() as uow:
        assert await uow.checkpoints.for_job("job-1") == []
    stored = {b.digest async for b in ctx.blob_store().listing()}
    assert "sha256:" + hashlib.sha256(b"the control plane's key").hexdigest() not in stored
