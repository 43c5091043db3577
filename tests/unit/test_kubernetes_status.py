"""Member states read from Kubernetes objects (adapters/kubernetes/status.py; the table in
docs/kubernetes.md#member-states). Pure: objects as the API server returns them."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.kubernetes.status import observe_job, observe_rayjob
from domain.ports import Observation

pytestmark = pytest.mark.unit
INDEX = "batch.kubernetes.io/job-completion-index"


DELETED = "cancelled outside TunePlane: its Job was deleted"


def job(suspend: bool = False, *conditions: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "tp-a"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conds = [
        {"type": c, "status": "True", "reason": "BackoffLimitExceeded", "message": "m"}
        for c in conditions
    ]
    return {"metadata": meta, "spec": {"suspend": suspend}, "status": {"conditions": conds}}


def pod(
    index: int, status: dict[str, Any], created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    meta = {
        "name": f"tp-a-{index}-{created[-3:-1]}",
        "annotations": {INDEX: str(index)},
        "creationTimestamp": created,
    }
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def main(state: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]}


def test_the_pod_decides_first() -> None:
    running = pod(0, main({"running": {}}))
    assert observe_job(job(), [running], None, 0, "q") == Observation("running")
    oom = pod(0, main({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "Failed"))
    assert observe_job(job(), [oom], None, 0, "q") == Observation(
        "exited", 137, "killed: out of memory (OOMKilled)"
    )
    pulling = pod(
        0, main({"waiting": {"reason": "ErrImagePull", "message": "not found"}}, "Pending")
    )
    assert observe_job(job(), [pulling], None, 0, "q") == Observation(
        "starting", None, "ErrImagePull: not found"
    )


def test_the_newest_pod_of_the_index_counts() -> None:
    old = pod(1, main({"terminated": {"exitCode": 1}}, "Failed"), "2026-01-01T00:00:00Z")
    new = pod(1, main({"running": {}}), "2026-01-01T00:00:09Z")
    other = pod(0, main({"terminated": {"exitCode": 0}}, "Succeeded"))
    assert observe_job(job(), [new, old, other], None, 1, "q").status == "running"


def test_a_failed_capsule_check_ends_the_member_with_the_runner_code() -> None:
    st = {
        "phase": "Failed",
        "initContainerStatuses": [{"name": "capsule", "state": {"terminated": {"exitCode": 91}}}],
        "containerStatuses": [
            {"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}
        ],
    }
    assert observe_job(job(), [pod(0, st)], None, 0, "q") == Observation(
        "exited", 91, "the Job Capsule check failed (exit 91)"
    )


def test_without_a_pod_the_job_decides() -> None:
    assert observe_job(None, [], None, 0, "q") == Observation("missing", None, DELETED)
    assert observe_job(job(False, "Failed"), [], None, 0, "q") == Observation(
        "exited", None, "its Job failed (BackoffLimitExceeded: m)"
    )
    assert observe_job(job(False, "Complete"), [], None, 0, "q") == Observation("exited", 0)
    assert observe_job(job(deleting=True), [], None, 0, "q").reason == DELETED
    assert observe_job(job(), [], None, 0, "q").reason == "waiting for its pod"


def test_an_end_tuneplane_did_not_ask_for_says_so() -> None:
    """Issue 19, item 6: a Job or pod deleted outside TunePlane ends its member with the reason
    every backend gives such an end (a stop through TunePlane is recorded as one first)."""
    killed = main({"terminated": {"exitCode": 143, "reason": "Error"}}, "Failed")
    assert observe_job(job(deleting=True), [pod(0, killed)], None, 0, "q") == Observation(
        "exited", 143, DELETED
    )
    gone = pod(0, killed)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    assert observe_job(job(), [gone], None, 0, "q") == Observation(
        "exited", 143, "cancelled outside TunePlane: its pod tp-a-0-00 was deleted"
    )
    done = main({"terminated": {"exitCode": 0, "reason": "Completed"}}, "Succeeded")
    assert observe_job(job(), [pod(0, done)], None, 0, "q") == Observation("exited", 0, "")
    assert observe_rayjob(None, [], None, 1, "q").reason == (
        "cancelled outside TunePlane: its RayJob was deleted"
    )


def test_waiting_for_kueue_says_why() -> None:
    workload = {
        "metadata": {"name": "w"},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "message": "insufficient quota for nvidia.com/gpu",
                }
            ]
        },
    }
    obs = observe_job(job(True), [], workload, 0, "team-a")
    assert obs == Observation(
        "starting",
        None,
        "waiting for Kueue to admit it (LocalQueue team-a): insufficient quota for nvidia.com/gpu",
    )


def test_other_kueue_evictions_are_named() -> None:
    evicted = {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": "m"}
    workload = {"metadata": {"name": "w"}, "status": {"conditions": [evicted]}}
    assert observe_job(job(), [pod(0, main({"running": {}}))], workload, 0, "q") == Observation(
        "exited", None, "evicted by Kueue (PodsReadyTimeout: m)"
    )


def test_a_kueue_preemption_proves_the_end_preempted_and_other_evictions_prove_nothing() -> None:
    """Issue 22: ``Evicted`` with reason ``Preempted`` is the attempt's ``preempted`` end (the
    job's retry policy may retry it), ``NodeFailures`` (topology-aware scheduling lost a node)
    its ``node-lost`` end; a PodsReadyTimeout or a deactivation proves neither."""

    def evicted(reason: str) -> dict[str, Any]:
        c = {"type": "Evicted", "status": "True", "reason": reason, "message": "m"}
        return {"metadata": {"name": "w"}, "status": {"conditions": [c]}}

    running = [pod(0, main({"running": {}}))]
    obs = observe_job(job(True), running, evicted("Preempted"), 0, "q")
    assert (obs.status, obs.reason, obs.cause) == ("exited", "preempted by Kueue: m", "preempted")
    obs = observe_rayjob({"metadata": {"name": "r"}}, [], evicted("Preempted"), 1, "q")
    assert obs.cause == "preempted"
    assert observe_job(job(), running, evicted("NodeFailures"), 0, "q").cause == "node-lost"
    for other in ("PodsReadyTimeout", "InactiveWorkload", "AdmissionCheck", "ClusterQueueStopped"):
        assert observe_job(job(), running, evicted(other), 0, "q").cause == ""
    gone = {"metadata": {"name": "w"}, "status": {"conditions": [{"type": "Evicted",
            "status": "False", "reason": "Preempted"}]}}  # fmt: skip
    assert observe_job(job(), running, gone, 0, "q").status == "running"


def test_a_rayjob_member_follows_the_ray_job() -> None:
    def ray(deployment: str, job_status: str = "", suspend: bool = False) -> dict[str, Any]:
        st = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "message": "boom"}
        return {"metadata": {"name": "tp-a"}, "spec": {"suspend": suspend}, "status": st}

    assert observe_rayjob(ray("", suspend=True), [], None, 2, "q").reason.startswith(
        "waiting for Kueue"
    )
    assert observe_rayjob(ray("Initializing"), [], None, 0, "q").status == "starting"
    assert observe_rayjob(ray("Running", "RUNNING"), [], None, 1, "q").status == "running"
    assert observe_rayjob(ray("Complete", "SUCCEEDED"), [], None, 3, "q") == Observation(
        "exited", 0
    )
    assert (
        observe_rayjob(ray("Failed", "FAILED"), [], None, 0, "q").reason
        == "the Ray job ended FAILED: boom"
    )
    head = {
        "metadata": {"name": "h", "labels": {"ray.io/node-type": "head"}},
        "spec": {"nodeName": "n9"},
        "status": {"phase": "Failed", "reason": "Evicted", "message": "disk"},
    }
    assert observe_rayjob(ray("Running", "RUNNING"), [head], None, 0, "q") == Observation(
        "exited", None, "evicted from n9: disk"
    )
