"""The objects one attempt becomes in Kubernetes: pure functions of the JobSpec and the pool's
target (docs/kubernetes.md#what-an-attempt-becomes). No I/O.

The runtime contract's process model decides the workload, never a fallback:

* ``torch-process-group``: an indexed batch ``Job`` (completions = parallelism = members) and a
  headless ``Service`` named like it, so member 0 is ``<name>-0.<name>``: the rendezvous.
  Every pod gets the usual variables; ``RANK``/``NODE_RANK`` come from its completion index.
* ``single-process`` and ``cpu``: the same indexed ``Job``, without Service and rendezvous.
* ``ray``: a ``RayJob`` (ray.io/v1): a head group and one worker group of members - 1.

Both are created suspended with ``kueue.x-k8s.io/queue-name``: Kueue admits them. The pool's
ResourceFlavor node labels go into the pods' nodeSelector. The Job Capsule travels in an
immutable ConfigMap owned by the workload; an init container checks the tar's sha256 and
unpacks it, and the runner checks the capsule again in the training container. The collector
token travels in a Secret mounted only into the collector sidecar.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from adapters.kubernetes import checkpoints
from adapters.kubernetes.config import Collector, PoolTarget
from adapters.kubernetes.init_containers import (
    CAPSULE_KEY,
    METRICS_DIR,
    capsule_init,
    collector_sidecar,
    index_env,
)
from adapters.kubernetes.names import (
    ANN_ATTEMPT,
    ANN_JOB,
    ANN_POOL,
    LABEL_NAME,
    MANAGED_BY,
    MANAGER,
    QUEUE_LABEL,
    Kind,
)
from domain.capsule import DIGEST_ENV, IMAGE_ENV, RUNNER
from domain.errors import InvalidInput
from domain.rendezvous import rendezvous_env
from domain.requests import require_limits
from domain.runtimes import PROCESS_MODELS
from domain.submission import JobSpec
from domain.threads import thread_env

Obj = dict[str, Any]
WORKDIR = "/workspace"
MAX_CAPSULE_BYTES = 1_000_000  # a ConfigMap holds at most 1 MiB


def workload_kind(process_model: str) -> Kind:
    """The workload a runtime's process model runs as; anything else is refused."""
    if process_model == "ray":
        return "rayjob"
    if process_model in PROCESS_MODELS:
        return "job"
    raise InvalidInput(
        f"process model {process_model!r} has no Kubernetes workload",
        fix="use a runtime whose process model is one of: " + ", ".join(PROCESS_MODELS),
        field="spec.runtime",
    )


def _meta(
    name: str, namespace: str, labels: dict[str, str] | None = None, group: str | None = None
) -> Obj:
    """Metadata; ``group`` is the attempt's object name (every object of it is labelled so)."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_BY: MANAGER, LABEL_NAME: group or name, **(labels or {})},
    }


def _resources(spec: JobSpec, target: PoolTarget) -> Obj:
    r = spec.resources
    require_limits(r.cpus, r.memory_mb, f"a pod of experiment {spec.experiment}")
    amounts: dict[str, str] = {"cpu": f"{round(r.cpus * 1000)}m", "memory": f"{r.memory_mb}Mi"}
    if r.gpus:
        amounts[target.gpu_resource] = str(r.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _env(pairs: dict[str, str]) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def pod_spec(
    *,
    name: str,
    spec: JobSpec,
    target: PoolTarget,
    container: Obj,
    collector: Collector | None,
    with_capsule: bool,
    indexed: bool,
    grace: int,
    job_id: str = "",
) -> Obj:
    """A member's pod: the training container, the capsule's init container, the collector
    sidecar and their volumes, and the job's folder of the checkpoint claim when the pool
    declares one. No service account token is mounted into any container."""
    volumes: list[Obj] = [
        {"name": "workspace", "emptyDir": {}},
        {"name": "metrics", "emptyDir": {}},
    ]
    mounts: list[Obj] = [
        {"name": "workspace", "mountPath": WORKDIR},
        {"name": "metrics", "mountPath": METRICS_DIR},
    ]
    init: list[Obj] = []
    if with_capsule and spec.capsule is not None:
        volumes += [
            {"name": "tuneplane", "emptyDir": {}},
            {"name": "capsule-tar", "configMap": {"name": f"{name}-capsule"}},
        ]
        mounts.insert(0, {"name": "tuneplane", "mountPath": "/tuneplane"})
        init.append(capsule_init(spec, spec.capsule.blob))
    if target.checkpoint_claim is not None:
        volumes.append(checkpoints.volume(target.checkpoint_claim))
        mounts.append(checkpoints.mount(job_id))
    if collector is not None:
        volumes += [
            {"name": "collector-token", "secret": {"secretName": f"{name}-collector"}},
            {"name": "collector-ca", "configMap": {"name": collector.ca_configmap}},
            {"name": "collector-state", "emptyDir": {}},
        ]
        init.append(collector_sidecar(collector, indexed, 0))
    out: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
    }
    if target.node_selector:
        out["nodeSelector"] = dict(sorted(target.node_selector.items()))
    if init:
        out["initContainers"] = init
    out["containers"] = [{**container, "volumeMounts": mounts}]
    out["volumes"] = volumes
    return out


def _member_env(
    spec: JobSpec, job_id: str, attempt_id: str, attempt: int, target: PoolTarget
) -> dict[str, str]:
    env = dict(spec.env)
    env.update(thread_env(spec.resources.cpus, spec.resources.gpus, spec.env))
    if target.checkpoint_claim is not None:
        env.update(checkpoints.env(attempt))
    env.update(
        TUNEPLANE_JOB_ID=job_id,
        TUNEPLANE_ATTEMPT_ID=attempt_id,
        TUNEPLANE_ATTEMPT=str(attempt),
        TUNEPLANE_METRICS_DIR=METRICS_DIR,
    )
    if spec.capsule is not None:
        env[DIGEST_ENV] = spec.capsule.digest
        env[IMAGE_ENV] = spec.runtime.digest
    return env


def _workload_meta(name: str, target: PoolTarget, job_id: str, attempt_id: str, pool: str) -> Obj:
    labels = {QUEUE_LABEL: target.queue}
    if target.priority_class:
        labels["kueue.x-k8s.io/priority-class"] = target.priority_class
    meta = _meta(name, target.namespace, labels)
    meta["annotations"] = {ANN_JOB: job_id, ANN_ATTEMPT: attempt_id, ANN_POOL: pool}
    return meta


def render_job(
    *,
    name: str,
    spec: JobSpec,
    job_id: str,
    attempt_id: str,
    attempt: int = 1,
    target: PoolTarget,
    collector: Collector | None,
    rendezvous_port: int,
    grace: int,
) -> Obj:
    """The indexed batch Job of an attempt (suspended, queued in Kueue)."""
    members = spec.members
    role = spec.roles[0]
    group = spec.runtime.process_model == "torch-process-group"
    env = _member_env(spec, job_id, attempt_id, attempt, target)
    if group:
        rdv = rendezvous_env(
            members=members,
            index=0,
            master_addr=f"{name}-0.{name}",
            master_port=rendezvous_port,
            gpus_per_member=spec.resources.gpus,
            process_model=spec.runtime.process_model,
        )
        env.update({k: v for k, v in rdv.items() if k not in ("RANK", "NODE_RANK")})
    env_list = [*_env(env), index_env("TUNEPLANE_MEMBER_INDEX")]
    if group:
        env_list += [index_env("RANK"), index_env("NODE_RANK")]
    command = ["/bin/sh", RUNNER] if spec.capsule is not None else list(spec.command)
    if target.checkpoint_claim is not None:
        command = checkpoints.wrapped(command, attempt)
    container: Obj = {
        "name": "trainer",
        "image": spec.runtime.digest,
        "command": command,
        "workingDir": WORKDIR,
        "env": env_list,
        "resources": _resources(spec, target),
    }
    if group:
        container["ports"] = [{"name": "rendezvous", "containerPort": rendezvous_port}]
    pod = pod_spec(
        name=name, spec=spec, target=target, container=container, collector=collector,
        with_capsule=True, indexed=True, grace=grace, job_id=job_id,
    )  # fmt: skip
    if group:
        pod["subdomain"] = name  # <name>-<index>.<name> resolves through the Service
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _workload_meta(name, target, job_id, attempt_id, role.pool),
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "completions": members,
            "parallelism": members,
            "backoffLimit": 0,  # TunePlane decides about new attempts; the Job never retries
            "template": {
                "metadata": {"labels": {MANAGED_BY: MANAGER, LABEL_NAME: name}},
                "spec": pod,
            },
        },
    }


def render_service(name: str, namespace: str, rendezvous_port: int) -> Obj:
    """The headless Service that gives a process group's pods their DNS names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # members rendezvous before any is ready
            "selector": {LABEL_NAME: name},
            "ports": [{"name": "rendezvous", "port": rendezvous_port}],
        },
    }


def render_rayjob(
    *,
    name: str,
    spec: JobSpec,
    job_id: str,
    attempt_id: str,
    attempt: int = 1,
    target: PoolTarget,
    collector: Collector | None,
    grace: int,
) -> Obj:
    """The RayJob of an attempt: member 0 is the head (the driver runs there), members 1.. are
    the one worker group. Suspended and queued in Kueue."""
    env = _member_env(spec, job_id, attempt_id, attempt, target)
    labels = {MANAGED_BY: MANAGER, LABEL_NAME: name}

    def group(container_name: str, index: int, head: bool) -> Obj:
        container: Obj = {
            "name": container_name,
            "image": spec.runtime.digest,
            "env": _env({**env, "TUNEPLANE_MEMBER_INDEX": str(index)}),
            "resources": _resources(spec, target),
        }
        pod = pod_spec(
            name=name, spec=spec, target=target, container=container,
            collector=collector if head else None, with_capsule=head, indexed=False,
            grace=grace, job_id=job_id,
        )  # fmt: skip
        return {"metadata": {"labels": dict(labels)}, "spec": pod}

    workers = spec.members - 1
    worker_groups = []
    if workers:
        worker_groups.append(
            {
                "groupName": "workers",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": group("ray-worker", 1, head=False),
            }
        )
    start = ["/bin/sh", RUNNER] if spec.capsule is not None else list(spec.command)
    if target.checkpoint_claim is not None:  # the driver, on the head, resumes
        start = checkpoints.wrapped(start, attempt, shell_safe=True)
    entry = shlex.join(start)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _workload_meta(name, target, job_id, attempt_id, spec.roles[0].pool),
        "spec": {
            "suspend": True,
            "entrypoint": entry,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 300,  # time to read the head's log after the end
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": group("ray-head", 0, True)},
                "workerGroupSpecs": worker_groups,
            },
        },
    }


def render_capsule(name: str, namespace: str, tar: bytes) -> Obj:
    """The immutable ConfigMap that carries the Job Capsule's tar (base64 in ``binaryData``)."""
    if len(tar) > MAX_CAPSULE_BYTES:
        raise InvalidInput(
            f"the Job Capsule is {len(tar)} bytes; the Kubernetes backend carries at most"
            f" {MAX_CAPSULE_BYTES} (one ConfigMap)",
            fix="make the source archive smaller (leave data and checkpoints out of it), or"
            " build the code into the runtime image",
            field="intent.source",
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(f"{name}-capsule", namespace, group=name),
        "immutable": True,
        "binaryData": {CAPSULE_KEY: base64.b64encode(tar).decode()},
    }


def render_token_secret(name: str, namespace: str) -> Obj:
    """The Secret each member's launch adds its collector member file to (``member-<i>.json``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(f"{name}-collector", namespace, group=name),
        "type": "Opaque",
        "data": {},
    }


def owned_by(obj: Obj, owner: Obj) -> Obj:
    """``obj`` with an ownerReference to ``owner`` (as created, with its uid): deleting the
    workload lets the garbage collector remove it."""
    meta = owner["metadata"]
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}


def render_attempt(
    *,
    name: str,
    spec: JobSpec,
    job_id: str,
    attempt_id: str,
    attempt: int = 1,
    target: PoolTarget,
    collector: Collector | None,
    rendezvous_port: int,
    grace: int,
) -> tuple[Kind, Obj, list[Obj]]:
    """(kind, the workload, what it owns but the capsule: the Service of a process group and
    the collector's token Secret). One role per job: a Job or RayJob has one pod shape."""
    if len(spec.roles) != 1:
        raise InvalidInput(
            f"the Kubernetes backend runs jobs of one role; this one has {len(spec.roles)}"
            f" ({spec.profile})",
            fix="submit with one profile",
            field="intent.profiles",
        )
    kind = workload_kind(spec.runtime.process_model)
    owned: list[Obj] = []
    if kind == "rayjob":
        workload = render_rayjob(
            name=name, spec=spec, job_id=job_id, attempt_id=attempt_id, attempt=attempt,
            target=target,
            collector=collector, grace=grace,
        )  # fmt: skip
    else:
        workload = render_job(
            name=name, spec=spec, job_id=job_id, attempt_id=attempt_id, attempt=attempt,
            target=target,
            collector=collector, rendezvous_port=rendezvous_port, grace=grace,
        )  # fmt: skip
        if spec.runtime.process_model == "torch-process-group":
            owned.append(render_service(name, target.namespace, rendezvous_port))
    if collector is not None:
        owned.append(render_token_secret(name, target.namespace))
    return kind, workload, owned
