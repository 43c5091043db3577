"""Checkpoints on a declared volume through the fake API server (docs/checkpoints.md#the-
kubernetes-backend-built): Kueue preempts attempt 1 of a job with a retry policy (issue 22 test
(c)'s machinery); attempt 2 is rendered with the same claim, the same job folder and attempt
number 2. The fake runs no pod, so the test plays the kubelet: it runs each attempt's rendered
trainer command as a real process, the claim's job folder being a temporary folder, and the
workload after the step's ``--`` standing in for the capsule runner. Attempt 1 writes a
checkpoint with the SDK; attempt 2's step verifies it and hands it over."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.kubernetes.checkpoints import STEP
from adapters.kubernetes.config import PoolTarget
from adapters.kubernetes.names import Handle
from application import jobs
from domain.lifecycle import JobState
from domain.retry import RetryPolicy
from tests.integration.test_kubernetes_supervisor import Rig, rig_on, running_job
from tests.integration.test_trl_recipes import RUNS, TINY, TRL_PYTHON, run
from tests.support.context import ALICE
from tests.support.kube_controllers import NS, until

pytestmark = pytest.mark.integration

CLAIM = "tuneplane-checkpoints"
REPO = Path(__file__).resolve().parents[2]
# attempt 1's workload: a checkpoint through the SDK; attempt 2's: what it resumes from
WRITE = """
import os
from adapters.sdk import report
path = report.checkpoint_dir() / "checkpoint-7"
path.mkdir(parents=True)
(path / "state.txt").write_text("trained to step 7")
assert report.checkpoint(path, 7)
print(os.environ["TUNEPLANE_ATTEMPT"], repr(os.environ["TUNEPLANE_RESUME_FROM"]))
"""
READ = """
import os
from pathlib import Path
start = Path(os.environ["TUNEPLANE_RESUME_FROM"])
print(os.environ["TUNEPLANE_ATTEMPT"], start, (start / "state.txt").read_text())
"""


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with rig_on(tmp_path, PoolTarget(NS, "team-a", checkpoint_claim=CLAIM)) as rig:
        yield rig


def kubelet(job: Any, claim: Path, workload: str) -> subprocess.CompletedProcess[str]:
    """Run member 0's trainer as the kubelet would: the claim's volume mounted from ``claim``
    at its subPath, the environment as rendered (the completion index 0), the command up to
    the step's ``--`` as rendered and ``workload`` (Python) after it."""
    pod = job["spec"]["template"]["spec"]
    trainer = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in trainer["volumeMounts"] if m["name"] == "checkpoints"]
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == CLAIM
    host = claim / mount["subPath"]
    host.mkdir(parents=True, exist_ok=True)  # the kubelet makes a missing subPath

    def mapped(value: str) -> str:
        return value.replace(mount["mountPath"], str(host))

    env = {e["name"]: mapped(e.get("value", "0")) for e in trainer["env"]}  # valueFrom: index 0
    command = trainer["command"]
    cut = command.index("--") + 1
    return subprocess.run(
        [mapped(arg) for arg in command[:cut]] + [sys.executable, "-c", workload],
        env={**env, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


async def test_attempt_two_after_a_kueue_preemption_resumes_from_attempt_ones_checkpoint(
    rig: Rig, tmp_path: Path
) -> None:
    claim = tmp_path / "claim"
    policy = RetryPolicy.parse({"max_attempts": 2, "on": ["preempted"], "backoff_seconds": 0})
    job_id, sup, handle, name = await running_job(rig, retry=policy)
    first = rig.api.get("jobs", NS, name)
    ran = kubelet(first, claim, WRITE)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["1", "''"] and "no checkpoint yet" in ran.stderr
    assert (claim / job_id / "1" / "checkpoint-7" / "COMPLETE").read_text() == "7\n"
    # its manifest, written by the SDK as it completed (the rendered environment asks for it)
    assert (claim / job_id / "1" / ".checkpoint-7.tuneplane-manifest.json").is_file()
    # Kueue preempts attempt 1 (test (c)'s shape); the policy makes attempt 2, a new Job
    workload = rig.api.all("workloads", NS)[0]["metadata"]["name"]
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "for x"}
    rig.api.merge("workloads", NS, workload, {"status": {"conditions": [evicted]}})
    rig.api.merge("jobs", NS, name, {"spec": {"suspend": True}})
    await until(rig.backend, handle, "exited")
    await sup.tick()
    await sup.tick()
    d = await jobs.get_job(rig.ctx, ALICE, job_id)
    assert len(d.attempts) == 2 and d.attempts[0].attempt.end == "preempted"
    second_handle = d.attempts[1].members[0].handle
    assert second_handle is not None
    second = rig.api.get("jobs", NS, Handle.parse(second_handle).name)
    assert second is not None
    pod = second["spec"]["template"]["spec"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": CLAIM}} in pod["volumes"]
    trainer = pod["containers"][0]
    assert {"name": "checkpoints", "mountPath": "/tuneplane/checkpoints", "subPath": job_id} in (
        trainer["volumeMounts"]
    )
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert (env["TUNEPLANE_ATTEMPT"], env["TUNEPLANE_CHECKPOINT_DIR"]) == (
        "2",
        "/tuneplane/checkpoints/2",
    )
    ran = kubelet(second, claim, READ)
    assert ran.returncode == 0, ran.stderr
    resumed = claim / job_id / "1" / "checkpoint-7"
    assert ran.stdout.strip().split(maxsplit=2) == ["2", str(resumed), "trained to step 7"]
    assert "resuming from checkpoint checkpoint-7 of attempt 1, step 7" in ran.stderr
    assert (claim / job_id / "1" / ".checkpoint-7.tuneplane-manifest.json").is_file()
    # attempt 2 runs to success as in test (c)
    second_name = Handle.parse(second_handle).name
    rig.controllers.admit(second_name)
    rig.controllers.pods(second_name, 1)
    rig.controllers.exit(second_name, 0, 0)
    rig.controllers.complete(second_name)
    await until(rig.backend, second_handle, "exited")
    await sup.tick()
    assert (await jobs.get_job(rig.ctx, ALICE, job_id)).job.state is JobState.SUCCEEDED


@pytest.mark.slow
@pytest.mark.skipif(not TRL_PYTHON, reason="no TRL: see tests/integration/test_trl_recipes.py")
def test_trl_sft_on_the_claims_layout_resumes_through_the_step(tmp_path: Path) -> None:
    """The SFT recipe as a Kubernetes member with a claim runs it (the job's folder, the SDK
    writing manifests, the step starting the recipe): attempt 1 dies at its step-4 save;
    attempt 2's step verifies checkpoint-2 against the manifest the SDK wrote, TRL resumes from
    it to step 4; and attempt 2's checkpoints verify in turn (TRL writes nothing into a
    checkpoint after the save the SDK marked)."""
    given = {**TINY, **RUNS["trl/sft"]}
    job = tmp_path / "claim" / "job-1"
    (job / "1").mkdir(parents=True)
    (job / "1" / "checkpoint-4").write_text("in the way")  # makes attempt 1's step-4 save fail
    manifests = {"TUNEPLANE_CHECKPOINT_MANIFESTS": "1", "TUNEPLANE_MEMBER_INDEX": "0"}

    def attempt(n: int) -> subprocess.CompletedProcess[str]:
        wrap = (sys.executable, "-I", "-c", STEP, str(job), str(n), "--")
        return run("trl/sft", given, tmp_path / f"pod-{n}", wrap=wrap, **manifests)

    died = attempt(1)
    assert died.returncode != 0
    assert (job / "1" / ".checkpoint-2.tuneplane-manifest.json").is_file(), died.stderr[-3000:]
    done = attempt(2)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    saved = job / "1" / "checkpoint-2"
    assert "resuming from checkpoint checkpoint-2 of attempt 1, step 2" in done.stderr
    assert f"tuneplane-recipe: resuming from {saved}" in done.stdout
    report = json.loads((tmp_path / "pod-2" / "outputs" / "report.json").read_text())
    assert report["global_step"] == 4
    assert sorted(p.name for p in (job / "1").iterdir()) == [
        ".checkpoint-2.tuneplane-manifest.json",
        "checkpoint-2",
    ]  # the failed save's leftover collected
    third = subprocess.run(
        [sys.executable, "-I", "-c", STEP, str(job), "3", "--", "true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert third.returncode == 0 and "skipped" not in third.stderr, third.stderr
    assert f"step 4: {job}/2/checkpoint-4" in third.stderr
