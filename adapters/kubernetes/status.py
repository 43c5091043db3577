"""What a member is doing, read from the objects the informers hold: its workload (Job or
RayJob), its pod, and the Kueue Workload that admits it. Pure (docs/kubernetes.md#member-states).

Order of evidence: an eviction by Kueue (preemption above all) is reported as such; then the
member's own pod (phase, container exit code, eviction by the kubelet); then the workload
(suspended: waiting for Kueue; failed or complete without a pod).
"""

from __future__ import annotations

from typing import Any

from adapters.kubernetes.names import INDEX_ANNOTATION, RAY_NODE_TYPE
from domain.ports import Observation
from domain.progress import ended_outside

Obj = dict[str, Any]
MAIN = {"trainer", "ray-head", "ray-worker"}


def condition(obj: Obj | None, kind: str) -> Obj | None:
    """The ``kind`` condition of ``obj``'s status when it is True."""
    for c in (obj or {}).get("status", {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _why(c: Obj) -> str:
    return ": ".join(x for x in (c.get("reason", ""), c.get("message", "")) if x)


# Kueue's eviction reasons that prove why the workload ended, as the job's retry policy names
# ends (domain/retry.py); the others (PodsReadyTimeout, AdmissionCheck, InactiveWorkload, a
# stopped queue, ...) are plain failures (docs/kubernetes.md#preemption)
EVICTION_CAUSES = {"Preempted": "preempted", "NodeFailures": "node-lost"}


def kueue_eviction(workload: Obj | None) -> Observation | None:
    evicted = condition(workload, "Evicted")
    if evicted is None:
        return None
    cause = EVICTION_CAUSES.get(str(evicted.get("reason", "")), "")
    if evicted.get("reason") == "Preempted":
        why = f"preempted by Kueue: {evicted.get('message', '')}"
        return Observation("exited", None, why, cause=cause)
    return Observation("exited", None, f"evicted by Kueue ({_why(evicted)})", cause=cause)


def waiting_for_admission(workload: Obj | None, queue: str, kueue: bool = True) -> Observation:
    reason = f"waiting for Kueue to admit it (LocalQueue {queue})"
    if not kueue:
        reason += "; this cluster serves no Kueue Workloads: install Kueue, nothing else admits it"
    pending = None
    for c in (workload or {}).get("status", {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") == "False":
            pending = c.get("message")
    return Observation("starting", None, f"{reason}: {pending}" if pending else reason)


def pod_index(pod: Obj) -> int | None:
    meta = pod.get("metadata", {})
    raw = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(
        INDEX_ANNOTATION
    )
    return int(raw) if raw is not None and str(raw).isdigit() else None


def is_head(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get(RAY_NODE_TYPE) == "head"


def ray_worker(pods: list[Obj], index: int) -> Obj | None:
    """The pod of member ``index`` (1 and up) of a RayJob: KubeRay's worker pods are replicas
    without an identity of their own, so member k is the k-th worker pod in creation order
    (then by name) among those that exist (docs/kubernetes.md, "Logs")."""
    workers = sorted(
        (p for p in pods if (p["metadata"].get("labels") or {}).get(RAY_NODE_TYPE) == "worker"),
        key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"].get("name", "")),
    )
    return workers[index - 1] if 0 < index <= len(workers) else None


def newest(pods: list[Obj]) -> Obj | None:
    if not pods:
        return None
    return max(
        pods,
        key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"].get("name", "")),
    )


def pod_observation(pod: Obj) -> Observation:
    st = pod.get("status", {})
    phase = st.get("phase", "Pending")
    if phase == "Failed" and st.get("reason") == "Evicted":
        node = pod.get("spec", {}).get("nodeName", "its node")
        return Observation("exited", None, f"evicted from {node}: {st.get('message', '')}")
    for init in st.get("initContainerStatuses") or []:
        done = (init.get("state") or {}).get("terminated")
        if init.get("name") == "capsule" and done and done.get("exitCode", 0) != 0:
            code = int(done["exitCode"])
            return Observation("exited", code, f"the Job Capsule check failed (exit {code})")
    main = [c for c in st.get("containerStatuses") or [] if c.get("name") in MAIN]
    state = (main[0].get("state") or {}) if main else {}
    if "terminated" in state:
        done = state["terminated"]
        code = int(done.get("exitCode", -1))
        why = done.get("reason", "")
        if why == "OOMKilled":
            return Observation("exited", code, "killed: out of memory (OOMKilled)")
        if pod.get("metadata", {}).get("deletionTimestamp") and code != 0:
            name = pod["metadata"].get("name", "")
            return Observation("exited", code, ended_outside(f"its pod {name} was deleted"))
        return Observation("exited", code, "" if why in ("", "Completed", "Error") else why)
    if phase == "Succeeded":
        return Observation("exited", 0)
    if phase == "Failed":
        return Observation("exited", None, _why(st) or "its pod failed")
    if "running" in state:
        return Observation("running")
    waiting = state.get("waiting") or {}
    why = _why(waiting)
    return Observation("starting", None, why or "its pod is starting")


def observe_job(
    job: Obj | None,
    pods: list[Obj],
    workload: Obj | None,
    index: int,
    queue: str,
    kueue: bool = True,
) -> Observation:
    """Member ``index`` of an indexed Job."""
    if job is None:
        return Observation("missing", None, ended_outside("its Job was deleted"))
    eviction = kueue_eviction(workload)
    if eviction is not None:
        return eviction
    pod = newest([p for p in pods if pod_index(p) == index])
    if pod is not None:
        seen = pod_observation(pod)
        if seen.status == "exited" and job.get("metadata", {}).get("deletionTimestamp"):
            return Observation("exited", seen.exit_code, ended_outside("its Job was deleted"))
        return seen
    failed = condition(job, "Failed")
    if failed is not None:
        return Observation("exited", None, f"its Job failed ({_why(failed)})")
    if condition(job, "Complete") is not None:
        return Observation("exited", 0)
    if job.get("metadata", {}).get("deletionTimestamp"):
        return Observation("exited", None, ended_outside("its Job was deleted"))
    if job.get("spec", {}).get("suspend"):
        return waiting_for_admission(workload, queue, kueue)
    return Observation("starting", None, "waiting for its pod")


_RAY_STARTING = {"", "New", "Initializing", "Waiting", "Retrying", "Suspended", "Suspending"}


def observe_rayjob(
    rayjob: Obj | None,
    pods: list[Obj],
    workload: Obj | None,
    index: int,
    queue: str,
    kueue: bool = True,
) -> Observation:
    """Member ``index`` of a RayJob: 0 is the head (where the driver runs), the rest the
    workers, which share the cluster's fate."""
    if rayjob is None:
        return Observation("missing", None, ended_outside("its RayJob was deleted"))
    eviction = kueue_eviction(workload)
    if eviction is not None:
        return eviction
    st = rayjob.get("status", {})
    deployment, job_status = st.get("jobDeploymentStatus", ""), st.get("jobStatus", "")
    if deployment in ("Complete", "Failed"):
        if job_status == "SUCCEEDED":
            return Observation("exited", 0)
        what = job_status or deployment
        if index == 0:
            return Observation("exited", None, f"the Ray job ended {what}: {st.get('message', '')}")
        return Observation("exited", None, f"the Ray cluster ended with its job ({what})")
    if index == 0:
        head = newest([p for p in pods if is_head(p)])
        if head is not None and head.get("status", {}).get("phase") == "Failed":
            return pod_observation(head)
    if rayjob.get("spec", {}).get("suspend") and deployment in _RAY_STARTING:
        return waiting_for_admission(workload, queue, kueue)
    if deployment == "Running":
        return Observation("running")
    return Observation("starting", None, f"the Ray cluster is {deployment or 'being made'}")
