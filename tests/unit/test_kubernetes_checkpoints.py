"""Checkpoints on a declared volume, as the Kubernetes renderer writes them into a member's pod
(docs/checkpoints.md#the-kubernetes-backend-built), and the ``checkpoint_claim`` setting."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.kubernetes import checkpoints
from adapters.kubernetes.checkpoints import MOUNT, STEP
from adapters.kubernetes.config import PoolTarget, parse
from adapters.kubernetes.render import render_attempt
from domain.capsule import RUNNER
from domain.errors import InvalidInput
from tests.unit.test_checkpoint_step import SHOW, save
from tests.unit.test_kubernetes_render import COLLECTOR, TARGET, spec

pytestmark = pytest.mark.unit

CLAIMED = dataclasses.replace(TARGET, checkpoint_claim="tuneplane-checkpoints")
JOB = "job_0192abcdef"
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def workload(process_model: str, target: PoolTarget, members: int = 2, **kw: Any) -> Any:
    _, obj, _ = render_attempt(
        name="tp-att-1", spec=spec(members, process_model, **kw), job_id=JOB, attempt_id="att-2",
        attempt=2, target=target, collector=COLLECTOR, rendezvous_port=29500, grace=30,
    )  # fmt: skip
    return obj


def pods(obj: Any) -> list[Any]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]["spec"]]
    ray = obj["spec"]["rayClusterSpec"]
    return [ray["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in ray["workerGroupSpecs"]
    ]


def valid(pod: Any) -> None:
    """What the API server's validation of a PodSpec checks of volumes and mounts
    (apis/core/validation: ValidateVolumes, validateVolumeMounts, validateLocalDescendingPath)."""
    names = [v["name"] for v in pod["volumes"]]
    assert len(names) == len(set(names)) and all(DNS_LABEL.match(n) for n in names)
    for c in pod["containers"] + pod.get("initContainers", []):
        paths = [m["mountPath"] for m in c.get("volumeMounts", [])]
        assert len(paths) == len(set(paths))
        for m in c.get("volumeMounts", []):
            assert m["name"] in names
            sub = m.get("subPath", "")
            assert not sub.startswith("/") and ".." not in sub.split("/")


def env_of(container: Any) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("process_model", ["torch-process-group", "single-process"])
def test_every_member_mounts_the_jobs_folder_and_is_started_by_the_step(
    process_model: str,
) -> None:
    job = workload(process_model, CLAIMED)
    pod = pods(job)[0]
    valid(pod)
    claim = {"claimName": "tuneplane-checkpoints"}
    assert {"name": "checkpoints", "persistentVolumeClaim": claim} in pod["volumes"]
    trainer = pod["containers"][0]
    assert {"name": "checkpoints", "mountPath": MOUNT, "subPath": JOB} in trainer["volumeMounts"]
    env = env_of(trainer)
    assert env["TUNEPLANE_CHECKPOINT_DIR"] == f"{MOUNT}/2"
    assert env["TUNEPLANE_ATTEMPT"] == "2"
    assert env["TUNEPLANE_CHECKPOINT_MANIFESTS"] == "1"  # the SDK writes them as they complete
    assert "TUNEPLANE_RESUME_FROM" not in env  # computed in the pod, by the step
    step = ["python3", "-I", "-c", STEP, MOUNT, "2", "--"]
    assert trainer["command"] == [*step, "/bin/sh", RUNNER]
    for init in pod["initContainers"]:  # the capsule's check and the collector: not the claim
        assert "checkpoints" not in {m["name"] for m in init["volumeMounts"]}
    assert pod["automountServiceAccountToken"] is False


def test_a_command_without_capsule_is_wrapped_too() -> None:
    bare = dataclasses.replace(spec(1, "single-process"), capsule=None)
    _, obj, _ = render_attempt(
        name="tp-att-1", spec=bare, job_id=JOB, attempt_id="att-1", attempt=1, target=CLAIMED,
        collector=None, rendezvous_port=29500, grace=30,
    )  # fmt: skip
    command = obj["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[4:] == [MOUNT, "1", "--", *bare.command]
    valid(obj["spec"]["template"]["spec"])


def test_a_rayjobs_driver_resumes_and_every_pod_mounts_the_claim(tmp_path: Path) -> None:
    ray = workload("ray", CLAIMED, members=3)
    for pod in pods(ray):
        valid(pod)
        container = pod["containers"][0]
        assert {"name": "checkpoints", "mountPath": MOUNT, "subPath": JOB} in container[
            "volumeMounts"
        ]
        assert env_of(container)["TUNEPLANE_CHECKPOINT_DIR"] == f"{MOUNT}/2"
    # the entrypoint as it reaches the head: KubeRay's submitter runs it in a bash line (its
    # words), `ray job submit` joins them with list2cmdline, Ray's job supervisor runs that
    # with /bin/sh; played here with the claim's folder at a temporary one
    argv = shlex.split(ray["spec"]["entrypoint"])
    assert argv[:3] == ["python3", "-I", "-c"]
    assert argv[4:] == [MOUNT, "2", "--", "/bin/sh", RUNNER]
    job = tmp_path / "job"
    resumed = save(job, 1, "checkpoint-3", 3)
    show = [sys.executable, "-c", SHOW, "TUNEPLANE_RESUME_FROM"]
    line = subprocess.list2cmdline([*argv[:4], str(job), "2", "--", *show])
    ran = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"TUNEPLANE_RESUME_FROM": str(resumed)}
    assert "resuming from checkpoint checkpoint-3 of attempt 1" in ran.stderr


@pytest.mark.parametrize("process_model", ["torch-process-group", "ray"])
def test_without_a_claim_members_get_no_checkpoint_directory(process_model: str) -> None:
    obj = workload(process_model, TARGET)
    for pod in pods(obj):
        valid(pod)
        assert "checkpoints" not in {v["name"] for v in pod["volumes"]}
        env = env_of(pod["containers"][0])
        assert "TUNEPLANE_CHECKPOINT_DIR" not in env
        assert "TUNEPLANE_CHECKPOINT_MANIFESTS" not in env
    if process_model == "ray":
        assert obj["spec"]["entrypoint"] == f"/bin/sh {RUNNER}"
    else:
        assert pods(obj)[0]["containers"][0]["command"] == ["/bin/sh", RUNNER]


def test_a_job_id_that_is_no_folder_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match="cannot name a folder"):
        render_attempt(
            name="tp-x", spec=spec(1, "single-process"), job_id="../etc", attempt_id="a",
            target=CLAIMED, collector=None, rendezvous_port=29500, grace=30,
        )  # fmt: skip


def config(**top: object) -> dict[str, object]:
    pools = {"a": {"namespace": "ml", "queue": "q"}, "b": {"namespace": "ml", "queue": "q"}}
    return {"kubernetes": {"pools": pools, **top}}


def test_the_claim_is_the_backends_default_and_a_pools_own() -> None:
    assert parse(config()).pools["a"].checkpoint_claim is None
    options = parse(config(checkpoint_claim="ckpt"))
    assert {p.checkpoint_claim for p in options.pools.values()} == {"ckpt"}
    data: Any = config(checkpoint_claim="ckpt")
    data["kubernetes"]["pools"]["b"]["checkpoint_claim"] = "fast.ckpt"
    options = parse(data)
    assert (options.pools["a"].checkpoint_claim, options.pools["b"].checkpoint_claim) == (
        "ckpt",
        "fast.ckpt",
    )


@pytest.mark.parametrize("claim", ["Ckpt", "ckpt/x", "-ckpt", "", 3])
def test_a_claim_that_is_no_claim_name_is_refused_naming_the_key(claim: object) -> None:
    with pytest.raises(InvalidInput) as info:
        parse(config(checkpoint_claim=claim))
    assert info.value.field == "kubernetes.checkpoint_claim"
    assert info.value.fix


def test_the_shell_safe_step_survives_the_parsers_a_ray_entrypoint_goes_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step whose source holds what bash and /bin/sh change ($(…), backticks, backslashes,
    both quotes) reaches python3 intact only in base64; the plain source would not."""
    nasty = "print(r'''$(echo no) `echo no` \\\\ \\\" \" ' $HOME''')\n"
    monkeypatch.setattr(checkpoints, "STEP", nasty)

    def through_ray(shell_safe: bool) -> str:
        entry = shlex.join(checkpoints.wrapped(["true"], 1, shell_safe=shell_safe))
        line = subprocess.list2cmdline(shlex.split(entry))
        return subprocess.run(line, shell=True, capture_output=True, text=True).stdout

    assert through_ray(True) == '$(echo no) `echo no` \\\\ \\" " \' $HOME\n'
    assert through_ray(False) != through_ray(True)
