"""The real supervisor (over in-memory repositories) driving the Kubernetes backend on the fake
API server: a job runs to success through Kueue admission, and a preemption by Kueue fails its
attempt with that reason, or, with a retry policy that names it, makes a new attempt as a new
Job (docs/kubernetes.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.kubernetes.backend import KubernetesBackend
from adapters.kubernetes.client import Kube
from adapters.kubernetes.config import KubernetesOptions, PoolTarget
from adapters.kubernetes.names import Handle
from application import jobs, runtimes, submissions
from application.context import Context
from application.logs import stream_logs
from application.supervisor import Supervisor
from domain.catalog import RuntimeSpec
from domain.fleet import Pool
from domain.lifecycle import JobState
from domain.retry import RetryPolicy
from tests.fixtures.kube_api import FakeKubeAPI
from tests.support.context import ADMIN, ALICE, memory_context
from tests.support.kube_controllers import NS, Controllers, until
from tests.unit.builders import an_intent

pytestmark = pytest.mark.integration

POOL = Pool("k8s", "dc1", "kubernetes", 0, 4.0, 8192)
BUSYBOX = RuntimeSpec(
    "busybox-k8s", "registry.example/busybox:1.36", None, "single-process",
    digest="sha256:" + "ab" * 32,
)  # fmt: skip


@dataclasses.dataclass
class Rig:
    ctx: Context
    api: FakeKubeAPI
    backend: KubernetesBackend
    controllers: Controllers


@contextlib.asynccontextmanager
async def rig_on(tmp_path: Path, target: PoolTarget) -> AsyncIterator[Rig]:
    """The fake API server, the backend with pool ``k8s`` mapped to ``target``, a context."""
    api = FakeKubeAPI()
    await api.start()
    options = KubernetesOptions(pools={"k8s": target})
    backend = KubernetesBackend(options, Kube.at(api.url))
    ctx = dataclasses.replace(
        memory_context(tmp_path, pools=(POOL,)), backends={"kubernetes": backend}
    )
    await runtimes.add_runtime(ctx, ADMIN, BUSYBOX)
    try:
        yield Rig(ctx, api, backend, Controllers(api))
    finally:
        await backend.close()
        await api.close()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with rig_on(tmp_path, PoolTarget(NS, "team-a")) as rig:
        yield rig


async def submit(ctx: Context, retry: RetryPolicy | None = None) -> str:
    extra = {"retry": retry} if retry is not None else {}
    intent = an_intent(runtime=BUSYBOX.name, params={"command": "echo hi"}, **extra)
    preview = await submissions.create_preview(ctx, ALICE, intent)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def handle_of(ctx: Context, job_id: str) -> str:
    d = await jobs.get_job(ctx, ALICE, job_id)
    handle = d.attempts[0].members[0].handle
    assert handle is not None
    return handle


async def test_a_job_is_admitted_by_kueue_runs_and_succeeds(rig: Rig) -> None:
    job_id = await submit(rig.ctx)
    sup = Supervisor(rig.ctx)
    await sup.tick()  # placed, launched: a suspended Job waiting for Kueue
    handle = await handle_of(rig.ctx, job_id)
    name = Handle.parse(handle).name
    job = rig.api.get("jobs", NS, name)
    assert job is not None and job["spec"]["suspend"] is True
    assert rig.api.get("configmaps", NS, f"{name}-capsule") is not None  # the Job Capsule
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert d.job.state is JobState.STARTING
    rig.controllers.admit(name)
    rig.controllers.pods(name, 1)
    await until(rig.backend, handle, "running")
    await sup.tick()
    assert (await jobs.get_job(rig.ctx, ALICE, job_id)).job.state is JobState.RUNNING
    rig.api.logs[(NS, f"{name}-0-x0")] = b"hi\n"
    rig.controllers.exit(name, 0, 0)
    rig.controllers.complete(name)
    await until(rig.backend, handle, "exited")
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert (d.job.state, d.job.exit_code) == (JobState.SUCCEEDED, 0)
    assert rig.api.get("jobs", NS, name) is None  # released: the Job and what it owns
    assert rig.api.all("configmaps", NS) == []


async def running_job(
    rig: Rig, retry: RetryPolicy | None = None
) -> tuple[str, Supervisor, str, str]:
    """A submitted one-member job, admitted by Kueue, its pod running and the supervisor told:
    (job id, supervisor, member handle, Kubernetes Job name)."""
    job_id = await submit(rig.ctx, retry)
    sup = Supervisor(rig.ctx)
    await sup.tick()
    handle = await handle_of(rig.ctx, job_id)
    name = Handle.parse(handle).name
    rig.controllers.admit(name)
    rig.controllers.pods(name, 1)
    await until(rig.backend, handle, "running")
    await sup.tick()
    return job_id, sup, handle, name


async def test_a_preemption_by_kueue_fails_the_attempt_as_such(rig: Rig) -> None:
    job_id, sup, handle, name = await running_job(rig)
    workload = rig.api.all("workloads", NS)[0]["metadata"]["name"]
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "for job-x"}
    rig.api.merge("workloads", NS, workload, {"status": {"conditions": [evicted]}})
    await until(rig.backend, handle, "exited")
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert d.job.state is JobState.FAILED
    assert d.attempts[0].members[0].reason == "preempted by Kueue: for job-x"
    assert rig.api.get("jobs", NS, name) is None  # Kueue will not run it again


async def test_a_kueue_preemption_ends_the_attempt_preempted_and_a_new_attempt_is_a_new_job(
    rig: Rig,
) -> None:
    """Issue 22 (c): Kueue evicts the running Job (the Workload's ``Evicted`` condition, reason
    ``Preempted``, and the Job suspended again): attempt 1 ends ``preempted``, its Job is
    deleted (Kueue never re-admits it behind the new attempt), and the job's policy makes
    attempt 2, a new Job, which Kueue admits and which runs to success."""
    policy = RetryPolicy.parse({"max_attempts": 2, "on": ["preempted"], "backoff_seconds": 0})
    job_id, sup, handle, name = await running_job(rig, retry=policy)
    workload = rig.api.all("workloads", NS)[0]["metadata"]["name"]
    message = "Preempted to accommodate a workload (UID: 1234) due to prioritization in the CQ"
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message}
    rig.api.merge("workloads", NS, workload, {"status": {"conditions": [evicted]}})
    rig.api.merge("jobs", NS, name, {"spec": {"suspend": True}})  # Kueue suspends it again
    await until(rig.backend, handle, "exited")
    await sup.tick()  # the end recorded, the reservation and the Job released
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert d.job.state is JobState.PENDING, d.job
    assert d.attempts[0].attempt.end == "preempted"
    assert d.attempts[0].members[0].reason == f"preempted by Kueue: {message}"
    assert d.job.reason.startswith("attempt 1 preempted (preempted by Kueue: ")
    assert rig.api.get("jobs", NS, name) is None  # the old Job is gone with its Workload
    assert rig.api.all("workloads", NS) == []
    await sup.tick()  # backoff 0: admitted and launched again, as a new Job
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert len(d.attempts) == 2
    second = d.attempts[1].members[0].handle
    assert second is not None
    second_name = Handle.parse(second).name
    assert second_name != name
    assert [j["metadata"]["name"] for j in rig.api.all("jobs", NS)] == [second_name]
    rig.controllers.admit(second_name)
    rig.controllers.pods(second_name, 1)
    await until(rig.backend, second, "running")
    await sup.tick()
    assert (await jobs.get_job(rig.ctx, ALICE, job_id)).job.state is JobState.RUNNING
    rig.controllers.exit(second_name, 0, 0)
    rig.controllers.complete(second_name)
    await until(rig.backend, second, "exited")
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert (d.job.state, d.job.exit_code) == (JobState.SUCCEEDED, 0)
    assert len(d.attempts) == 2 and d.attempts[0].attempt.end == "preempted"


async def test_a_cancelled_job_is_deleted_in_the_foreground_and_recorded_stopped(
    rig: Rig,
) -> None:
    job_id, sup, handle, name = await running_job(rig)
    await jobs.cancel_job(rig.ctx, ALICE, job_id)
    await sup.tick()  # asks the backend to stop: the Job is deleted in the foreground
    await until(rig.backend, handle, "missing")
    deletes = [q for m, p, q in rig.api.requests if m == "DELETE" and p.endswith(f"/jobs/{name}")]
    assert deletes[0]["propagationPolicy"] == "Foreground"
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert d.job.state is JobState.CANCELLED
    assert d.attempts[0].members[0].state == "stopped"
    assert rig.api.all("pods", NS) == []  # collected with their Job


async def test_a_job_deleted_outside_tuneplane_fails_with_that_reason(rig: Rig) -> None:
    """Issue 19, item 6: `kubectl delete job` behind TunePlane's back ends the job `failed`,
    saying so in the reason every backend gives such an end (a `tp job stop` is `cancelled`)."""
    job_id, sup, handle, name = await running_job(rig)
    rig.api.remove("jobs", NS, name)  # kubectl delete job (its pods go with it)
    await until(rig.backend, handle, "missing")
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert d.job.state is JobState.FAILED
    reason = "cancelled outside TunePlane: its Job was deleted"
    assert (d.attempts[0].members[0].state, d.attempts[0].members[0].reason) == ("failed", reason)
    assert d.job.reason == reason


async def test_every_members_log_is_kept_after_the_workload_is_gone(rig: Rig) -> None:
    """Issue 19, item 2: each member's pod log is stored when it ends, so after release (the
    Job and its pods deleted) member 1's log is its own, never member 0's."""
    intent = an_intent(runtime=BUSYBOX.name, profiles=("cpu:8",), params={"command": "x"})
    preview = await submissions.create_preview(rig.ctx, ALICE, intent)
    receipt = await submissions.commit(
        rig.ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4())
    )
    sup = Supervisor(rig.ctx)
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, receipt.job_id)
    handles = [m.handle or "" for m in d.attempts[0].members]
    assert len(handles) == 2
    name = Handle.parse(handles[0]).name
    rig.controllers.admit(name)
    rig.controllers.pods(name, 2)
    for index in (0, 1):
        rig.api.logs[(NS, f"{name}-{index}-x{index}")] = f"rank {index}\n".encode()
        rig.controllers.exit(name, index, 0)
    rig.controllers.complete(name)
    for handle in handles:
        await until(rig.backend, handle, "exited")
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, receipt.job_id)
    assert d.job.state is JobState.SUCCEEDED
    assert rig.api.get("jobs", NS, name) is None  # released: the pods are gone
    for index in (0, 1):
        stream = await stream_logs(rig.ctx, ALICE, receipt.job_id, follow=False, member=index)
        assert b"".join([c async for c in stream]) == f"rank {index}\n".encode()
