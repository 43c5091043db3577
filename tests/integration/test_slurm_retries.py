"""Issue 22 (d): the ends slurmctld proves, through the real supervisor (over in-memory
repositories) driving the Slurm backend on the real cluster of tests/fixtures/slurm.py. A
node that goes down ends the attempt ``node-lost``; a job that slurmctld requeued anyway is
cancelled and ends ``preempted``; either way the job's retry policy makes a new attempt, a new
Slurm job, which runs and succeeds (docs/slurm.md#ends-and-retries)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.slurm.attempt_dirs import Handle
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from application import jobs, submissions
from application.context import Context
from application.jobs import JobDetails
from application.supervisor import Supervisor
from domain.fleet import Pool
from domain.lifecycle import JobState
from domain.retry import RetryPolicy
from tests.fixtures.slurm import SlurmCluster
from tests.support.context import ALICE, memory_context
from tests.unit.builders import an_intent

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.slurm]

POOL = Pool("debug", "dc1", "slurm", 0, 2.0, 2000)


class UniqueIds:
    """Ids unique across the tests of one session's Slurm cluster (Slurm jobs are named after
    attempt ids, and the backend looks a job up by its name)."""

    def new(self, kind: str) -> str:
        return f"{kind}-{uuid.uuid4().hex[:12]}"


@dataclasses.dataclass
class Rig:
    ctx: Context
    backend: SlurmBackend
    cluster: SlurmCluster
    tmp: Path

    def slurm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), env=self.cluster.env(), capture_output=True, text=True)


@pytest.fixture
async def rig(slurm_cluster: SlurmCluster, tmp_path: Path) -> AsyncIterator[Rig]:
    client = SlurmClient(SlurmEndpoint(f"unix:{slurm_cluster.socket}"))
    backend = SlurmBackend(client, tmp_path / "shared")
    ctx = dataclasses.replace(
        memory_context(tmp_path, pools=(POOL,)), backends={"slurm": backend}, ids=UniqueIds()
    )
    try:
        yield Rig(ctx, backend, slurm_cluster, tmp_path)
    finally:
        for handle in (await backend.held()).values():
            await backend.stop(handle, 0)
        await backend.close()


async def submit(rig: Rig, on: str) -> str:
    """A job whose first attempt runs until the test ends it, and whose next one succeeds."""
    marker = rig.tmp / "attempt-1-ran"
    command = f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exec sleep 600"
    policy = RetryPolicy.parse({"max_attempts": 2, "on": [on], "backoff_seconds": 0})
    intent = an_intent(params={"command": command}, retry=policy)
    preview = await submissions.create_preview(rig.ctx, ALICE, intent)
    key = str(uuid.uuid4())
    receipt = await submissions.commit(rig.ctx, ALICE, preview.id, preview.digest, key)
    return receipt.job_id


async def ticked_until(rig: Rig, sup: Supervisor, job_id: str, *states: JobState) -> JobDetails:
    deadline = time.monotonic() + 120  # a bound on a hang, not a measured time
    while True:
        await sup.tick()
        d = await jobs.get_job(rig.ctx, ALICE, job_id)
        if d.job.state in states:
            return d
        assert time.monotonic() < deadline, d
        await asyncio.sleep(0.2)


async def running(rig: Rig, on: str) -> tuple[str, Supervisor, Handle]:
    """(job id, supervisor, attempt 1's handle) once attempt 1's command runs on a node."""
    job_id = await submit(rig, on)
    sup = Supervisor(rig.ctx)
    d = await ticked_until(rig, sup, job_id, JobState.RUNNING)
    handle = Handle.parse(d.attempts[0].members[0].handle or "")
    assert handle is not None
    deadline = time.monotonic() + 60
    while not (rig.tmp / "attempt-1-ran").exists():  # its command started on a node
        assert time.monotonic() < deadline, "attempt 1 never started its command"
        await asyncio.sleep(0.2)
    return job_id, sup, handle


async def retried_and_succeeded(rig: Rig, sup: Supervisor, job_id: str, first: Handle) -> None:
    d = await ticked_until(rig, sup, job_id, JobState.SUCCEEDED, JobState.FAILED)
    assert (d.job.state, len(d.attempts)) == (JobState.SUCCEEDED, 2), d.job
    second = Handle.parse(d.attempts[1].members[0].handle or "")
    assert second is not None and second.job_id != first.job_id  # a new Slurm job


async def test_a_node_that_goes_down_ends_the_attempt_node_lost_and_a_new_job_runs(
    rig: Rig,
) -> None:
    job_id, sup, handle = await running(rig, "node-lost")
    [slurm_job] = await rig.backend.client.job(handle.job_id) or []
    node = slurm_job.nodes
    down = rig.slurm("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
    assert down.returncode == 0, down.stderr
    try:
        d = await ticked_until(rig, sup, job_id, JobState.PENDING, JobState.FAILED)
        assert d.job.state is JobState.PENDING, d.job
        assert d.attempts[0].attempt.end == "node-lost"
        member = d.attempts[0].members[0]
        assert f"Slurm reports job {handle.job_id} NODE_FAIL" in member.reason, member
        await retried_and_succeeded(rig, sup, job_id, handle)
    finally:
        rig.slurm("scontrol", "update", f"nodename={node}", "state=resume")


async def test_a_job_slurm_requeued_is_cancelled_and_ends_the_attempt_preempted(
    rig: Rig,
) -> None:
    job_id, sup, handle = await running(rig, "preempted")
    refused = rig.slurm("scontrol", "requeue", str(handle.job_id))  # submitted --no-requeue
    assert refused.returncode != 0 and "disabled" in refused.stderr, refused
    # an operator turns requeueing back on and requeues it: slurmctld would run it again
    assert rig.slurm("scontrol", "update", f"jobid={handle.job_id}", "requeue=1").returncode == 0
    requeued = rig.slurm("scontrol", "requeue", str(handle.job_id))
    assert requeued.returncode == 0, requeued.stderr
    d = await ticked_until(rig, sup, job_id, JobState.PENDING, JobState.FAILED)
    assert d.job.state is JobState.PENDING, d.job
    assert d.attempts[0].attempt.end == "preempted"
    member = d.attempts[0].members[0]
    assert member.reason.startswith(f"Slurm requeued job {handle.job_id} (once;"), member
    [old] = await rig.backend.client.job(handle.job_id) or []
    assert old.state == "CANCELLED"  # it will not run again under this attempt
    await retried_and_succeeded(rig, sup, job_id, handle)
