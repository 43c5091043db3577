"""The Kubernetes backend's renderers against golden manifests (reviewed by hand once; see
docs/kubernetes.md#what-an-attempt-becomes). Regenerate after a deliberate change with
``TUNEPLANE_UPDATE_GOLDEN=1 pytest tests/unit/test_kubernetes_render.py`` and review the diff."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.kubernetes.config import Collector, PoolTarget
from adapters.kubernetes.names import Handle, object_name
from adapters.kubernetes.render import render_attempt, render_capsule, workload_kind
from domain.capsule import CapsuleRef
from domain.catalog import Resources, RuntimePin
from domain.errors import InvalidInput
from domain.requests import RoleSpec
from domain.submission import JobSpec

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "kubernetes_golden"
DIGEST = "sha256:" + "ab" * 32
TARGET = PoolTarget(
    namespace="ml",
    queue="team-a",
    node_selector={"cloud.example/gpu": "h200"},
)
COLLECTOR = Collector(
    image="registry.example/tuneplane@sha256:" + "cd" * 32,
    gateway="tuneplane-telemetry.tuneplane.svc:7443",
    ca_configmap="tuneplane-ca",
)


def spec(members: int, process_model: str, roles: int = 1) -> JobSpec:
    gpus = 0 if members == 1 else 8
    role = RoleSpec(
        "main",
        "cpu:2" if gpus == 0 else f"h200:{8 * members}",
        "h200",
        members,
        Resources(cpus=2.5, memory_mb=4096, gpus=gpus, gpu_model="h200" if gpus else None),
    )
    return JobSpec(
        experiment="demo",
        method="trl/sft",
        params={},
        command=("python", "train.py", "--lr", "1e-4"),
        runtime=RuntimePin(
            "trl-gpu",
            "registry.example/ml/trl:0.12",
            f"registry.example/ml/trl@{DIGEST}",
            "3.11",
            process_model,
            {"trl": "0.12.0"},
        ),
        backend="kubernetes",
        queue="default",
        roles=(role,) * roles,
        source=None,
        env={"HF_HOME": "/workspace/.hf"},
        capsule=CapsuleRef("sha256:" + "11" * 32, "sha256:" + "22" * 32, 4096),
    )


def rendered(members: int, process_model: str) -> list[dict[str, Any]]:
    name = object_name("att-0192abcdef0123456789abcdef")
    kind, workload, owned = render_attempt(
        name=name, spec=spec(members, process_model), job_id="job-1", attempt_id="att-1",
        target=TARGET, collector=COLLECTOR, rendezvous_port=29500, grace=30,
    )  # fmt: skip
    assert kind == workload_kind(process_model)
    return [workload, *owned]


CASES = [(m, pm) for pm in ("torch-process-group", "ray") for m in (1, 4, 32)]


@pytest.mark.parametrize(("members", "process_model"), CASES)
def test_rendered_manifests_match_the_golden_ones(members: int, process_model: str) -> None:
    kind = "rayjob" if process_model == "ray" else "job"
    path = GOLDEN / f"{kind}-{members}.yaml"
    text = yaml.safe_dump_all(rendered(members, process_model), sort_keys=False, width=100)
    if os.environ.get("TUNEPLANE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs: review and regenerate"


def test_jobs_are_suspended_queued_and_pinned_to_the_pools_flavor() -> None:
    for members, process_model in CASES:
        workload = rendered(members, process_model)[0]
        assert workload["spec"]["suspend"] is True
        assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        templates = (
            [workload["spec"]["template"]]
            if workload["kind"] == "Job"
            else [workload["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]]
            + [g["template"] for g in workload["spec"]["rayClusterSpec"]["workerGroupSpecs"]]
        )
        for t in templates:
            assert t["spec"]["nodeSelector"] == {"cloud.example/gpu": "h200"}
            assert t["spec"]["automountServiceAccountToken"] is False


def test_an_indexed_job_has_one_completion_per_member_and_a_rendezvous() -> None:
    job, service, _secret = rendered(4, "torch-process-group")
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 4)
    assert job["spec"]["completionMode"] == "Indexed"
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer["env"]}
    name = job["metadata"]["name"]
    assert env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["WORLD_SIZE"] == "4"
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["RANK"] == {"fieldRef": {"fieldPath": index}}
    assert service["spec"]["clusterIP"] == "None"
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]


def test_the_collector_token_reaches_only_the_sidecar() -> None:
    for members, process_model in CASES:
        workload = rendered(members, process_model)[0]
        text = yaml.safe_dump(workload)
        assert text.count("secretName:") == 1  # the token Secret: one volume
        pods = (
            [workload["spec"]["template"]["spec"]]
            if workload["kind"] == "Job"
            else [workload["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]]
        )
        for pod in pods:
            sidecars = [c for c in pod["initContainers"] if c["name"] == "collector"]
            assert sidecars[0]["volumeMounts"][0]["name"] == "collector-token"
            for c in pod["containers"] + [c for c in pod["initContainers"] if c not in sidecars]:
                assert "collector-token" not in {m["name"] for m in c["volumeMounts"]}


def test_a_process_model_decides_the_workload_with_no_fallback() -> None:
    assert workload_kind("ray") == "rayjob"
    assert workload_kind("torch-process-group") == "job"
    assert workload_kind("single-process") == "job"
    with pytest.raises(InvalidInput, match="mpi"):
        workload_kind("mpi")
    plain = rendered(1, "single-process")
    assert [o["kind"] for o in plain] == ["Job", "Secret"]  # no Service, no rendezvous
    env = {e["name"] for e in plain[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "MASTER_ADDR" not in env


def test_several_roles_and_big_capsules_are_refused_with_the_fix() -> None:
    with pytest.raises(InvalidInput, match="one role") as info:
        render_attempt(
            name="tp-x", spec=spec(2, "ray", roles=2), job_id="j", attempt_id="a",
            target=TARGET, collector=None, rendezvous_port=29500, grace=30,
        )  # fmt: skip
    assert info.value.fix
    with pytest.raises(InvalidInput, match="Job Capsule is 1000001 bytes"):
        render_capsule("tp-x", "ml", b"x" * 1_000_001)


def test_names_are_deterministic_dns_labels_and_handles_round_trip() -> None:
    assert object_name("att-0192abcdef0123456789abcdef") == "tp-att-0192abcdef0123456789abcdef"
    odd = object_name("Att_1/x")
    assert odd == object_name("Att_1/x") and odd.startswith("tp-") and len(odd) == 19
    handle = Handle("ml", "rayjob", "tp-a", 3)
    assert Handle.parse(str(handle)) == handle
    with pytest.raises(InvalidInput):
        Handle.parse("ml/pod/tp-a/3")


@pytest.mark.parametrize(("cpus", "memory_mb"), [(1e-7, 4096), (0.001, 4096), (2.5, 0)])
def test_a_pod_below_the_smallest_limits_is_refused(cpus: float, memory_mb: int) -> None:
    """Issue 18, defect 8: cpus 1e-7 rendered as "0m", a pod without a CPU limit."""
    one = spec(1, "single-process")
    role = dataclasses.replace(one.roles[0], resources=Resources(cpus, memory_mb))
    with pytest.raises(InvalidInput, match="no workload runs without CPU and memory limits"):
        render_attempt(
            name="tp-x", spec=dataclasses.replace(one, roles=(role,)), job_id="j",
            attempt_id="a", target=TARGET, collector=None, rendezvous_port=29500, grace=30,
        )  # fmt: skip
