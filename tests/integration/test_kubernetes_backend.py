"""The Kubernetes backend against an API server: the in-process fake (tests/fixtures/kube_api.py)
always, and a real cluster when ``KUBECONFIG`` is set (docs/kubernetes.md, "Testing against a
real cluster").

On the fake, the tests play Kueue, the Job controller and the kubelet (``Controllers``); the
fault tests (dropped watches, 410, lost answers, an unreachable server) run only there. On a
real cluster, its own controllers do the work and the tests wait for them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from adapters.collector_tokens import CollectorTokens
from adapters.kubernetes.backend import KubernetesBackend
from adapters.kubernetes.client import Kube
from adapters.kubernetes.config import Collector, KubernetesOptions, PoolTarget
from adapters.kubernetes.names import Handle
from domain.capsule import CapsuleRef
from domain.catalog import Resources, RuntimePin
from domain.errors import NotFound, Unavailable
from domain.jobs import Member
from domain.lifecycle import MemberState
from domain.ports import LaunchRequest
from domain.progress import member_after
from domain.requests import RoleSpec
from domain.submission import JobSpec
from tests.fixtures.kube_api import FakeKubeAPI
from tests.support.context import FakeClock
from tests.support.kube_controllers import NS, Controllers, until
from tests.support.signing import OneKey

pytestmark = pytest.mark.integration


QUEUE = os.environ.get("TUNEPLANE_K8S_TEST_QUEUE", "team-a")
IMAGE = os.environ.get("TUNEPLANE_K8S_TEST_IMAGE", "registry.example/ml/trl@sha256:" + "ab" * 32)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def spec(
    members: int,
    process_model: str = "torch-process-group",
    command: tuple[str, ...] = ("sh", "-c", "echo hi"),
) -> JobSpec:
    role = RoleSpec("main", "cpu:1", "cpu", members, Resources(cpus=0.1, memory_mb=64))
    pin = RuntimePin("t", IMAGE.split("@")[0], IMAGE, None, process_model, {})
    return JobSpec(
        "demo", "custom/custom", {}, command, pin, "kubernetes", "default", (role,), None, {}
    )


def requests(job_spec: JobSpec, capsule: bytes | None = None) -> list[LaunchRequest]:
    tag = uuid.uuid4().hex[:12]
    job, attempt = f"job-{tag}", f"att-{tag}"
    return [
        LaunchRequest(job, attempt, f"mem-{tag}-{i}", i, job_spec, None, capsule=capsule)
        for i in range(job_spec.members)
    ]


@dataclass
class Rig:
    backend: KubernetesBackend
    api: FakeKubeAPI | None  # None: a real cluster
    controllers: Controllers | None


def options(collector: bool = False) -> KubernetesOptions:
    col = (
        Collector("registry.example/tuneplane@sha256:" + "cd" * 32, "gw:7443", "tuneplane-ca")
        if collector
        else None
    )
    return KubernetesOptions(
        pools={"cpu": PoolTarget(NS, QUEUE)}, collector=col, kubeconfig=os.environ.get("KUBECONFIG")
    )


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.kubernetes)])
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    if request.param == "real":
        if not os.environ.get("KUBECONFIG"):
            pytest.skip("no KUBECONFIG: the real-cluster run is documented in docs/kubernetes.md")
        opts = options()
        backend = KubernetesBackend(opts, await Kube.connect(opts.kubeconfig), sync_wait=30)
        yield Rig(backend, None, None)
        await backend.close()
        return
    api = FakeKubeAPI()
    await api.start()
    backend = KubernetesBackend(
        options(collector=True),
        Kube.at(api.url),
        tokens=CollectorTokens(OneKey()),
        clock=FakeClock(NOW),
    )
    try:
        yield Rig(backend, api, Controllers(api))
    finally:
        await backend.close()
        await api.close()


def fake_only(rig: Rig) -> tuple[FakeKubeAPI, Controllers]:
    if rig.api is None or rig.controllers is None:
        pytest.skip("fault injection needs the fake API server")
    return rig.api, rig.controllers


async def launch_all(backend: KubernetesBackend, reqs: list[LaunchRequest]) -> list[str]:
    return [await backend.launch(r) for r in reqs]


async def test_suspend_admit_run_succeed(rig: Rig) -> None:
    reqs = requests(spec(2))
    handles = await launch_all(rig.backend, reqs)
    name = Handle.parse(handles[0]).name
    assert await launch_all(rig.backend, reqs) == handles  # idempotent per member
    if rig.controllers is not None:
        assert rig.api is not None
        job = rig.api.get("jobs", NS, name)
        assert job is not None and job["spec"]["suspend"] is True
        waiting = await rig.backend.observe(handles[0])
        assert waiting.status == "starting" and f"LocalQueue {QUEUE}" in waiting.reason
        rig.controllers.admit(name)
        rig.controllers.pods(name, 2)
        assert (await until(rig.backend, handles[1], "running")).exit_code is None
        rig.api.logs[(NS, f"{name}-0-x0")] = b"hi\n"
        for i in range(2):
            rig.controllers.exit(name, i, 0)
        rig.controllers.complete(name)
    for h in handles:
        assert (await until(rig.backend, h, "exited")).exit_code == 0
    assert b"hi" in b"".join([c async for c in rig.backend.logs(handles[0], follow=False)])
    assert set((await rig.backend.held()).items()) >= {
        (r.member_id, h) for r, h in zip(reqs, handles, strict=True)
    }
    await rig.backend.release(handles[0])
    await rig.backend.release(handles[0])  # idempotent
    await until(rig.backend, handles[0], "missing")
    if rig.api is not None:
        assert rig.api.all("services", NS) == [] and rig.api.all("secrets", NS) == []


async def test_pod_failure_and_eviction_become_member_states(rig: Rig) -> None:
    api, ctl = fake_only(rig)
    handles = await launch_all(rig.backend, requests(spec(3)))
    name = Handle.parse(handles[0]).name
    ctl.admit(name)
    ctl.pods(name, 3)
    ctl.exit(name, 1, 3)
    obs = await until(rig.backend, handles[1], "exited")
    assert obs.exit_code == 3
    failed = member_after(_member(), obs, False, None, NOW)
    assert failed.state is MemberState.FAILED and failed.reason == "exited with code 3"
    evicted = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory.",
    }
    api.merge("pods", NS, f"{name}-2-x2", {"status": evicted})
    obs = await until(rig.backend, handles[2], "exited")
    assert obs.reason == "evicted from n2: The node was low on resource: memory."
    assert (await rig.backend.observe(handles[0])).status == "running"


async def test_kueue_preemption_is_reported_as_such(rig: Rig) -> None:
    api, ctl = fake_only(rig)
    handles = await launch_all(rig.backend, requests(spec(2)))
    name = Handle.parse(handles[0]).name
    ctl.admit(name)
    ctl.pods(name, 2)
    await until(rig.backend, handles[0], "running")
    workload = api.all("workloads", NS)[0]["metadata"]["name"]
    message = (
        "Preempted to accommodate a workload (UID: 1234) due to prioritization in the ClusterQueue"
    )
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message}
    api.merge("workloads", NS, workload, {"status": {"conditions": [evicted]}})
    api.merge("jobs", NS, name, {"spec": {"suspend": True}})  # Kueue stops the Job
    for h in handles:
        obs = await until(rig.backend, h, "exited")
        assert obs.reason == f"preempted by Kueue: {message}"
        member = member_after(_member(), obs, False, None, NOW)
        assert member.state is MemberState.FAILED and member.reason.startswith("preempted by Kueue")


async def test_a_dropped_watch_resumes_from_its_resource_version(rig: Rig) -> None:
    api, ctl = fake_only(rig)
    handles = await launch_all(rig.backend, requests(spec(1)))
    name = Handle.parse(handles[0]).name
    ctl.admit(name)
    ctl.pods(name, 1)
    await until(rig.backend, handles[0], "running")
    pods = rig.backend.informers[(NS, "pods")]
    await api.watching("pods")
    seen = pods.rv
    api.drop_watches()
    ctl.exit(name, 0, 0)  # while (maybe) disconnected
    assert (await until(rig.backend, handles[0], "exited")).exit_code == 0
    resumed = [q["resourceVersion"] for q in api.watch_params("pods")]
    assert seen in resumed[1:]  # the second watch went on from where the first stopped
    pod = f"{name}-0-x0"
    final = pods.items[pod]["metadata"]["resourceVersion"]
    assert [c for c in pods.changes if c[1] == pod and c[2] == final] == [("MODIFIED", pod, final)]


async def test_410_gone_relists_without_losing_or_duplicating_a_change(rig: Rig) -> None:
    api, ctl = fake_only(rig)
    handles = await launch_all(rig.backend, requests(spec(1)))
    name = Handle.parse(handles[0]).name
    ctl.admit(name)
    ctl.pods(name, 1)
    await until(rig.backend, handles[0], "running")
    pods = rig.backend.informers[(NS, "pods")]
    await api.watching("pods")
    before = len(api.watch_params("pods"))
    api.drop_watches()
    ctl.exit(name, 0, 0)
    api.compact()  # the change above is no longer in the history: watching from before is 410
    assert (await until(rig.backend, handles[0], "exited")).exit_code == 0
    pod = f"{name}-0-x0"
    final = pods.items[pod]["metadata"]["resourceVersion"]
    assert [c for c in pods.changes if c[1] == pod and c[2] == final] == [("MODIFIED", pod, final)]
    lists = [
        q for m, p, q in api.requests if m == "GET" and p.endswith("/pods") and "watch" not in q
    ]
    assert len(lists) >= 2 and len(api.watch_params("pods")) > before  # listed again, watching on
    await api.watching("pods", before + 2)  # the watch that met 410, then the one after the list
    changes = len(pods.changes)
    ctl.complete(name)  # another collection's change: the pods' resourceVersion lags behind
    api.bookmark()  # a bookmark moves it on, with no change to apply
    deadline = time.monotonic() + 30
    while pods.rv != str(api.rv):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert len(pods.changes) == changes


async def test_unreachable_api_server_at_submit_is_a_clear_error_and_no_double_object(
    rig: Rig,
) -> None:
    api, _ = fake_only(rig)
    reqs = requests(spec(2))
    port = int(api.url.rsplit(":", 1)[1])
    await api.close()
    with pytest.raises(
        Unavailable, match=f"cannot reach the Kubernetes API server at {api.url}"
    ) as info:
        await rig.backend.launch(reqs[0])
    assert info.value.fix
    with pytest.raises(Unavailable, match="no state of"):  # no stale guess, and no stall
        await rig.backend.observe(f"{NS}/job/tp-x/0")
    await api.start(port)
    api.lose_response.add(("POST", "jobs"))  # created, but the answer is lost on the way
    with pytest.raises(Unavailable):
        await rig.backend.launch(reqs[0])
    handles = await launch_all(rig.backend, reqs)  # the retry finds the Job by its name
    assert len(api.all("jobs", NS)) == 1 and len(api.all("services", NS)) == 1
    assert Handle.parse(handles[1]).index == 1


async def test_the_collector_token_is_in_the_secret_for_the_sidecar_only(rig: Rig) -> None:
    api, _ = fake_only(rig)
    reqs = requests(spec(2))
    await launch_all(rig.backend, reqs)
    name = Handle.parse(await rig.backend.launch(reqs[0])).name
    secret = api.get("secrets", NS, f"{name}-collector")
    assert secret is not None and sorted(secret["data"]) == ["member-0.json", "member-1.json"]
    member = json.loads(base64.b64decode(secret["data"]["member-1.json"]))
    claims = await CollectorTokens(rig.backend.tokens.keys).verify(member["token"], NOW)  # type: ignore[union-attr]
    assert (claims.scope.member_id, member["member"]) == (reqs[1].member_id, reqs[1].member_id)
    job = api.get("jobs", NS, name)
    assert job is not None
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert "collector" not in json.dumps(trainer)


async def test_a_ray_runtime_becomes_a_rayjob_and_its_capsule_a_configmap(rig: Rig) -> None:
    api, ctl = fake_only(rig)
    ray = spec(3, "ray")
    ray = JobSpec(
        **{
            **{f: getattr(ray, f) for f in ray.__dataclass_fields__},
            "capsule": CapsuleRef("sha256:" + "1" * 64, "sha256:" + "2" * 64, 5),
        }
    )
    handles = await launch_all(rig.backend, requests(ray, capsule=b"12345"))
    h = Handle.parse(handles[2])
    assert h.kind == "rayjob"
    rayjob = api.get("rayjobs", NS, h.name)
    assert rayjob is not None and rayjob["spec"]["suspend"] is True
    capsule = api.get("configmaps", NS, f"{h.name}-capsule")
    assert (
        capsule is not None and base64.b64decode(capsule["binaryData"]["capsule.tar"]) == b"12345"
    )
    assert capsule["metadata"]["ownerReferences"][0]["uid"] == rayjob["metadata"]["uid"]
    ctl.admit(h.name, kind="RayJob")
    api.merge(
        "rayjobs",
        NS,
        h.name,
        {"status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}},
    )
    await until(rig.backend, handles[2], "running")
    # KubeRay's pods: the head and two workers; each member reads its own pod's log
    for kind, pod in (("head", "head-x"), ("worker", "worker-a"), ("worker", "worker-b")):
        labels = {
            "app.kubernetes.io/managed-by": "tuneplane",
            "tuneplane.io/name": h.name,
            "ray.io/node-type": kind,
        }
        api.create("pods", NS, {"metadata": {"name": f"{h.name}-{pod}", "labels": labels}})
        api.logs[(NS, f"{h.name}-{pod}")] = f"log of {pod}\n".encode()
    for handle, pod in zip(handles, ("head-x", "worker-a", "worker-b"), strict=True):
        assert await own_log(rig.backend, handle) == f"log of {pod}\n".encode(), handle
    api.merge(
        "rayjobs",
        NS,
        h.name,
        {
            "status": {
                "jobDeploymentStatus": "Failed",
                "jobStatus": "FAILED",
                "message": "driver exited 1",
            }
        },
    )
    assert (
        await until(rig.backend, handles[0], "exited")
    ).reason == "the Ray job ended FAILED: driver exited 1"
    await rig.backend.stop(handles[0], 5)
    await until(rig.backend, handles[1], "missing")
    assert api.all("configmaps", NS) == []  # collected with its owner


async def own_log(backend: KubernetesBackend, handle: str, limit: float = 30) -> bytes:
    """The member's log once the backend's pod informer has seen its pod."""
    deadline = time.monotonic() + limit  # a bound on a hang, not a measured time
    while True:
        try:
            return b"".join([c async for c in backend.logs(handle, follow=False)])
        except NotFound:
            assert time.monotonic() < deadline, f"no pod for {handle}"
            await asyncio.sleep(0.02)


def _member() -> Member:
    return Member("m", "a", 0, MemberState.RUNNING, NOW, handle="h")


@pytest.mark.parametrize("members", [1, 4, 32])
@pytest.mark.parametrize("process_model", ["torch-process-group", "ray"])
async def test_rendered_workloads_pass_the_api_servers_validation(
    rig: Rig, members: int, process_model: str
) -> None:
    """A server-side dry run (``dryRun=All``) of what a launch would create; on a real cluster
    this is the full schema and admission check of the rendered manifests (the checkpoint
    claim's volume, mount and wrapped command included)."""
    from adapters.kubernetes.client import path
    from adapters.kubernetes.render import render_attempt

    job_spec = spec(members, process_model)
    if rig.api is None and process_model == "ray":
        crd = rig.backend.informer(NS, "rayjobs")
        with contextlib.suppress(Unavailable):
            await crd.wait_synced(30)
        if not crd.served:
            pytest.skip("KubeRay is not installed in this cluster")
    _, workload, owned = render_attempt(
        name="tp-dry-run",
        spec=job_spec,
        job_id="job-dry",
        attempt_id="att-dry",
        # with the checkpoint claim for several members (a dry run needs no such claim)
        target=PoolTarget(NS, QUEUE, checkpoint_claim="tp-checkpoints" if members > 1 else None),
        collector=None,
        rendezvous_port=29500,
        grace=30,
    )
    plurals = {"Job": "jobs", "RayJob": "rayjobs", "Service": "services", "Secret": "secrets"}
    for obj in [workload, *owned]:
        url = path(plurals[obj["kind"]], NS)
        answer = await rig.backend.kube.request("POST", url, body=obj, query=[("dryRun", "All")])
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
    if rig.api is not None:
        assert rig.api.all("jobs", NS) == [] and rig.api.all("rayjobs", NS) == []


async def test_without_kueue_a_suspended_job_says_what_is_missing(rig: Rig) -> None:
    api, _ = fake_only(rig)
    api.crds.discard("workloads")  # a cluster without Kueue: nothing would ever admit it
    handles = await launch_all(rig.backend, requests(spec(1)))
    obs = await rig.backend.observe(handles[0])
    assert obs.status == "starting" and "install Kueue" in obs.reason
