"""Issue 22 item 3 on Slurm: checkpoints kept in place in the shared directory, through the
real supervisor (over in-memory repositories) driving the Slurm backend on the real cluster of
tests/fixtures/slurm.py. One job, three attempts, each a new Slurm job running a tiny shell
command: attempt 1 writes two checkpoints by the contract and fails; the newest is changed
after it was recorded, so attempt 2 resumes from the one before, in attempt 1's directory,
writes a third and fails; attempt 3 resumes from that one and succeeds. The last two are kept
where they are; the rest, and the last attempt's empty directory, are removed
(docs/checkpoints.md#the-slurm-backend-built)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from application import checkpoints_in_place, jobs, submissions
from application.context import Context
from application.jobs import JobDetails
from application.supervisor import Supervisor
from domain.lifecycle import ATTEMPT_FINAL, JOB_FINAL, JobState
from domain.retry import RetryPolicy
from tests.fixtures.slurm import SlurmCluster
from tests.integration.test_slurm_retries import POOL, UniqueIds
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.slurm]

# every attempt says what it was given and reads the checkpoint it resumes from; attempts 1
# and 2 write checkpoints (files first, COMPLETE last, with the step) and fail
COMMAND = """seen={seen}/$TUNEPLANE_ATTEMPT
printf '%s\\n%s\\n' "$TUNEPLANE_CHECKPOINT_DIR" "$TUNEPLANE_RESUME_FROM" >"$seen.env"
if [ -n "$TUNEPLANE_RESUME_FROM" ]; then cat "$TUNEPLANE_RESUME_FROM/w.txt" >"$seen.read"; fi
save() {{ d="$TUNEPLANE_CHECKPOINT_DIR/checkpoint-$1"; mkdir -p "$d"
  echo "step $1" >"$d/w.txt"; echo "$1" >"$d/COMPLETE"; }}
case "$TUNEPLANE_ATTEMPT" in
  1) save 1; save 2; exit 1 ;;
  2) save 3; exit 1 ;;
esac
"""


@pytest.fixture
async def rig(slurm_cluster: SlurmCluster, tmp_path: Path) -> AsyncIterator[Context]:
    client = SlurmClient(SlurmEndpoint(f"unix:{slurm_cluster.socket}"))
    backend = SlurmBackend(client, tmp_path / "shared")
    ctx = dataclasses.replace(
        memory_context(tmp_path, pools=(POOL,)),
        backends={"slurm": backend},
        backend_checkpoints={"slurm": backend.checkpoints},
        ids=UniqueIds(),
    )
    try:
        yield ctx
    finally:
        for handle in (await backend.held()).values():
            await backend.stop(handle, 0)
        await backend.close()


async def ticked_until(
    ctx: Context, sup: Supervisor, job_id: str, done: Callable[[JobDetails], bool]
) -> JobDetails:
    deadline = time.monotonic() + 120  # a bound on a hang, not a measured time
    while True:
        await sup.tick()
        d = await jobs.get_job(ctx, ALICE, job_id)
        if done(d):
            return d
        assert time.monotonic() < deadline, d
        await asyncio.sleep(0.2)


def ended(n: int) -> Callable[[JobDetails], bool]:
    """Attempt ``n`` ended and the job waits for the next (or ended)."""
    return lambda d: (
        len(d.attempts) >= n
        and d.attempts[n - 1].attempt.state in ATTEMPT_FINAL
        and d.job.state in (JobState.PENDING, *JOB_FINAL)
    )


def seen(tmp: Path, attempt: int) -> tuple[list[str], str | None]:
    env = (tmp / "seen" / f"{attempt}.env").read_text().splitlines()
    read = tmp / "seen" / f"{attempt}.read"
    return env, read.read_text().strip() if read.exists() else None


async def test_attempts_resume_in_place_from_the_newest_checkpoint_that_verifies(
    rig: Context, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "seen").mkdir()
    policy = RetryPolicy.parse({"max_attempts": 3, "on": ["failed"], "backoff_seconds": 0})
    command = COMMAND.format(seen=tmp_path / "seen")
    intent = an_intent(params={"command": command}, retry=policy)
    preview = await submissions.create_preview(rig, ALICE, intent)
    receipt = await submissions.commit(rig, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    job_id, sup = receipt.job_id, Supervisor(rig)
    storage = rig.backend_checkpoints["slurm"]
    root = tmp_path / "shared" / "checkpoints" / job_id

    d = await ticked_until(rig, sup, job_id, ended(1))
    assert d.job.state is JobState.PENDING, d.job
    assert seen(tmp_path, 1) == ([f"{root}/1", ""], None)  # a first attempt resumes nothing
    # recorded (as by the sweep, or the next launch), then changed where it is kept
    assert await checkpoints_in_place.harvest(rig, storage, job_id, [1]) == 2
    (root / "1" / "checkpoint-2" / "w.txt").write_text("step 2, changed\n")

    with caplog.at_level(logging.WARNING, logger="tuneplane.checkpoints"):
        d = await ticked_until(rig, sup, job_id, ended(2))
    assert d.job.state is JobState.PENDING, d.job
    assert seen(tmp_path, 2) == ([f"{root}/2", f"{root}/1/checkpoint-1"], "step 1")
    assert "checkpoint-2 of attempt 1 skipped: w.txt has 16 bytes" in caplog.text

    d = await ticked_until(rig, sup, job_id, ended(3))
    assert (d.job.state, len(d.attempts)) == (JobState.SUCCEEDED, 3), d.job
    assert seen(tmp_path, 3) == ([f"{root}/3", f"{root}/2/checkpoint-3"], "step 3")
    async with rig.uow() as uow:
        kept = await uow.checkpoints.for_job(job_id)
    assert [(c.attempt, c.name, c.step, c.kept_in) for c in kept] == [
        (1, "checkpoint-2", 2, f"{root}/1/checkpoint-2"),
        (2, "checkpoint-3", 3, f"{root}/2/checkpoint-3"),
    ]  # the last two, where they were written; checkpoint-1 collected
    assert [p.name for p in (root / "1").iterdir()] == ["checkpoint-2"]
    assert await checkpoints_in_place.sweep(rig, storage) == 0  # the job ended: swept
    assert sorted(p.name for p in root.iterdir()) == ["1", "2"]  # attempt 3 kept nothing
    await sup.close()
