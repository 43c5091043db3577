"""Checkpoints kept in place (application/checkpoints_in_place.py over SharedDirCheckpoints and
the in-memory adapters; Slurm's shared directory): what an attempt marked complete is recorded
where it is, never copied, the last two are kept and the rest removed, and the next attempt
resumes from the newest one that verifies where it is, read-only, skipping with the reason one
changed, added to or linked out of after it was recorded."""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.shared_checkpoints import SharedDirCheckpoints
from application import jobs
from application.checkpoints_in_place import for_launch, harvest, sweep
from application.context import Context
from application.supervisor import Supervisor
from domain.errors import Unavailable
from domain.lifecycle import JobState, MemberState
from tests.application.test_checkpoints import ctx as ctx  # the fixture: job-1 in memory
from tests.application.test_checkpoints import running_ended_and_gone, write
from tests.application.test_supervisor import submit
from tests.support.context import ALICE, memory_context

pytestmark = pytest.mark.unit


@pytest.fixture
def storage(tmp_path: Path) -> SharedDirCheckpoints:
    return SharedDirCheckpoints(tmp_path / "shared" / "checkpoints")


def names(directory: str | Path) -> list[str]:
    return sorted(os.listdir(directory))


async def recorded(ctx: Context) -> list[tuple[int, str, int | None]]:
    async with ctx.uow() as uow:
        return [(c.attempt, c.name, c.step) for c in await uow.checkpoints.for_job("job-1")]


async def test_checkpoints_are_recorded_in_place_kept_two_and_resumed_read_only(
    ctx: Context, storage: SharedDirCheckpoints, tmp_path: Path
) -> None:
    first = await for_launch(ctx, storage, "job-1", 1)
    work = Path(first.work)
    assert first.resume is None and work == storage.root / "job-1" / "1" and names(work) == []
    write(first.work, "checkpoint-100", {"w.bin": b"a" * 10}, "100")
    write(first.work, "checkpoint-200", {"w.bin": b"b" * 10, "opt/s.bin": b"s"}, "200\n")
    write(first.work, "checkpoint-300", {"w.bin": b"c" * 10})  # its name gives the step
    write(first.work, "checkpoint-400", {"w.bin": b"d"}, marker=None)  # cut short
    write(first.work, "..bad", {"w.bin": b"e"})  # not one plain segment: never resumed from
    (work / "checkpoint-500").mkdir()
    (work / "checkpoint-500" / "COMPLETE").symlink_to("/etc/hostname")  # a marker elsewhere
    (work / "loose.txt").write_text("left by the workload")

    second = await for_launch(ctx, storage, "job-1", 2)
    assert await recorded(ctx) == [(1, "checkpoint-200", 200), (1, "checkpoint-300", 300)]
    async with ctx.uow() as uow:
        newest = (await uow.checkpoints.for_job("job-1"))[-1]
    assert newest.kept_in == str(work / "checkpoint-300")  # where it is: no blob of it
    assert {f.path for f in newest.manifest.files} == {"COMPLETE", "w.bin"}
    assert names(work) == ["checkpoint-200", "checkpoint-300"]
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]  # nothing copied
    assert (second.work, second.resume_root, second.resume) == (
        str(storage.root / "job-1" / "2"),
        str(work),
        "checkpoint-300",
    )
    assert not second.skipped
    resumed = work / "checkpoint-300"
    assert (resumed / "w.bin").read_bytes() == b"c" * 10  # in place, as it was written
    for path in (resumed, resumed / "w.bin", resumed / "COMPLETE"):
        assert not stat.S_IMODE(path.stat().st_mode) & 0o222, path  # read-only now
    assert await for_launch(ctx, storage, "job-1", 2) == second  # repeated after a crash
    assert await harvest(ctx, storage, "job-1", [1]) == 0  # nothing left to record


async def test_a_checkpoint_changed_after_it_was_recorded_is_skipped_for_the_one_before(
    ctx: Context, storage: SharedDirCheckpoints
) -> None:
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {"w.bin": b"good"}, "1")
    write(first.work, "checkpoint-2", {"w.bin": b"newer"}, "2")
    assert await harvest(ctx, storage, "job-1", [1]) == 2
    (Path(first.work) / "checkpoint-2" / "w.bin").write_bytes(b"NEWER")  # same size
    second = await for_launch(ctx, storage, "job-1", 2)
    assert second.resume == "checkpoint-1" and second.resume_root == first.work
    [said] = second.skipped
    assert said.startswith("checkpoint-2 of attempt 1 skipped: w.bin changed after")
    assert await recorded(ctx) == [(1, "checkpoint-1", 1), (1, "checkpoint-2", 2)]


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda c: (c / "w.bin").write_bytes(b"longer!"), "w.bin has 7 bytes, not the 4"),
        (lambda c: (c / "w.bin").unlink(), "1 of its files are missing"),
        (lambda c: (c / "extra.bin").write_bytes(b"x"), "extra.bin was added after it"),
        (lambda c: (c / "out").symlink_to("/etc"), "out is a symbolic link"),
        (lambda c: os.mkfifo(c / "pipe"), "pipe was added after it"),  # never opened
        (shutil.rmtree, "its directory"),
    ],
)
async def test_every_way_a_checkpoint_fails_to_verify_says_why(
    ctx: Context, storage: SharedDirCheckpoints, damage: Callable[[Path], object], why: str
) -> None:
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {"w.bin": b"good"}, "1")
    assert await harvest(ctx, storage, "job-1", [1]) == 1
    damage(Path(first.work) / "checkpoint-1")
    second = await for_launch(ctx, storage, "job-1", 2)
    assert second.resume is None and second.resume_root == second.work
    [said] = second.skipped
    assert why in said, said


async def test_a_link_out_of_a_checkpoint_is_never_followed(
    ctx: Context, storage: SharedDirCheckpoints, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the workload's")
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {"w.bin": b"w"}, "1")
    (Path(first.work) / "checkpoint-1" / "key").symlink_to(secret)
    (Path(first.work) / "checkpoint-1" / "sub").symlink_to(tmp_path, target_is_directory=True)
    second = await for_launch(ctx, storage, "job-1", 2)
    async with ctx.uow() as uow:
        [c] = await uow.checkpoints.for_job("job-1")
    assert {f.path for f in c.manifest.files} == {"COMPLETE", "w.bin"}  # the links left out
    assert second.resume is None and "is a symbolic link" in second.skipped[0]
    assert secret.stat().st_mode & 0o200  # sealing it followed no link
    # an attempt's directory replaced by a link out of the shared directory: never entered
    elsewhere = tmp_path / "elsewhere" / "checkpoint-9"
    write(str(elsewhere.parent), "checkpoint-9", {"w.bin": b"x"}, "9")
    (storage.root / "job-1" / "3").symlink_to(elsewhere.parent, target_is_directory=True)
    await for_launch(ctx, storage, "job-1", 4)
    assert (elsewhere / "w.bin").exists()  # neither recorded nor removed
    assert (3, "checkpoint-9", 9) not in await recorded(ctx)


async def test_a_checkpoint_of_too_many_files_is_not_one(
    ctx: Context, storage: SharedDirCheckpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("adapters.checkpoint_dirs.MAX_FILES", 3)
    first = await for_launch(ctx, storage, "job-1", 1)
    write(first.work, "checkpoint-1", {f"f{i}": b"x" for i in range(5)}, "1")
    write(first.work, "checkpoint-2", {"w.bin": b"x"}, "2")
    second = await for_launch(ctx, storage, "job-1", 2)
    assert await recorded(ctx) == [(1, "checkpoint-2", 2)]
    assert second.resume == "checkpoint-2"
    assert not (Path(first.work) / "checkpoint-1").exists()  # collected with the rest


async def test_a_forgotten_checkpoint_a_crash_left_behind_is_removed_by_the_next_harvest(
    ctx: Context, storage: SharedDirCheckpoints
) -> None:
    first = await for_launch(ctx, storage, "job-1", 1)
    for step in (1, 2, 3):
        write(first.work, f"checkpoint-{step}", {"w.bin": b"%d" % step}, str(step))
    await harvest(ctx, storage, "job-1", [1])
    # killed after forgetting checkpoint-1 and before removing its directory: it is back
    write(first.work, "checkpoint-1", {"w.bin": b"1"}, "1")
    await harvest(ctx, storage, "job-1", [1])
    assert await recorded(ctx) == [(1, "checkpoint-2", 2), (1, "checkpoint-3", 3)]
    assert names(first.work) == ["checkpoint-2", "checkpoint-3"]


async def test_a_shared_directory_that_cannot_be_read_is_unavailable_and_nothing_is_half_done(
    ctx: Context, tmp_path: Path
) -> None:
    (tmp_path / "shared").write_text("not a directory")  # an unmounted or broken share
    storage = SharedDirCheckpoints(tmp_path / "shared" / "checkpoints")
    with pytest.raises(Unavailable) as raised:
        await for_launch(ctx, storage, "job-1", 2)
    assert "shared checkpoint directory" in raised.value.message and raised.value.fix
    assert await recorded(ctx) == []


async def test_a_launch_waits_while_the_shared_directory_cannot_be_read(tmp_path: Path) -> None:
    """The supervisor defers the launch (the job neither fails nor launches half) and launches
    with the attempt's checkpoint directory once the directory can be read."""
    backend = MemoryBackend()
    shared = tmp_path / "shared"
    shared.write_text("not mounted")
    storage = SharedDirCheckpoints(shared / "checkpoints")
    ctx = dataclasses.replace(
        memory_context(tmp_path, backend), backend_checkpoints={"local": storage}
    )
    job_id = await submit(ctx)
    sup = Supervisor(ctx)
    await sup.tick()
    d = await jobs.get_job(ctx, ALICE, job_id)
    assert d.job.state is JobState.STARTING and backend.launches == 0
    assert [m.state for m in d.attempts[0].members] == [MemberState.PENDING]
    shared.unlink()  # mounted again
    await sup.tick()
    [member] = backend.members.values()
    request = member.request
    assert (request.checkpoints, request.resume) == (str(storage.root / job_id / "1"), None)
    await sup.close()


async def test_a_sweep_keeps_the_checkpoints_of_jobs_that_ended_and_removes_the_rest(
    ctx: Context, storage: SharedDirCheckpoints
) -> None:
    running, ended, orphan = await running_ended_and_gone(
        ctx, lambda job: for_launch(ctx, storage, job, 1)
    )
    for launched in (running, ended, orphan):
        write(launched.work, "checkpoint-5", {"w.bin": b"w"}, "5")
        write(launched.work, "checkpoint-6", {"w.bin": b"w"}, marker=None)
    assert await sweep(ctx, storage) == 1  # job-3's checkpoint
    assert await sweep(ctx, storage) == 0  # once is enough
    async with ctx.uow() as uow:
        assert [c.name for c in await uow.checkpoints.for_job("job-3")] == ["checkpoint-5"]
        assert await uow.checkpoints.for_job("job-2") == []
    assert names(running.work) == ["checkpoint-5", "checkpoint-6"]  # untouched
    assert names(ended.work) == ["checkpoint-5"]  # kept where it is; the rest removed
    assert not (storage.root / "job-9").exists()
