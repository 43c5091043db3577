"""Playing a cluster's controllers on the fake API server (Kueue, the Job controller, the
kubelet), and waiting for a member's state: shared by the Kubernetes backend's tests."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from adapters.kubernetes.backend import KubernetesBackend
from domain.ports import Observation
from tests.fixtures.kube_api import FakeKubeAPI

NS = os.environ.get("TUNEPLANE_K8S_TEST_NAMESPACE", "ml")


@dataclass
class Controllers:
    """Kueue, the Job controller and the kubelet, played on the fake API server."""

    api: FakeKubeAPI

    def admit(self, name: str, kind: str = "Job") -> None:
        plural = "jobs" if kind == "Job" else "rayjobs"
        job = self.api.get(plural, NS, name)
        assert job is not None
        owner = {
            "apiVersion": job["apiVersion"],
            "kind": kind,
            "name": name,
            "uid": job["metadata"]["uid"],
        }
        conditions = [
            {"type": t, "status": "True", "reason": t} for t in ("QuotaReserved", "Admitted")
        ]
        self.api.create(
            "workloads",
            NS,
            {
                "metadata": {"name": f"job-{name}-1a2b3", "ownerReferences": [owner]},
                "status": {"conditions": conditions},
            },
        )
        self.api.merge(plural, NS, name, {"spec": {"suspend": False}})

    def pods(self, name: str, members: int, phase: str = "Running") -> None:
        """The Job controller's pods (owned by the Job), each running its ``trainer``."""
        job = self.api.get("jobs", NS, name)
        assert job is not None
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "controller": True}
        owner["uid"] = job["metadata"]["uid"]
        for i in range(members):
            meta = {
                "ownerReferences": [owner],
                "name": f"{name}-{i}-x{i}",
                "labels": {
                    "app.kubernetes.io/managed-by": "tuneplane",
                    "tuneplane.io/name": name,
                    "batch.kubernetes.io/job-completion-index": str(i),
                },
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
            }
            state = {"running": {"startedAt": "2026-01-01T00:00:02Z"}}
            st = {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}]}
            self.api.create(
                "pods", NS, {"metadata": meta, "spec": {"nodeName": f"n{i}"}, "status": st}
            )

    def exit(self, name: str, index: int, code: int) -> None:
        pod = f"{name}-{index}-x{index}"
        phase = "Succeeded" if code == 0 else "Failed"
        done = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        self.api.merge(
            "pods",
            NS,
            pod,
            {"status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": done}]}},
        )

    def complete(self, name: str) -> None:
        self.api.merge(
            "jobs", NS, name, {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
        )


async def until(
    backend: KubernetesBackend, handle: str, status: str, limit: float = 300
) -> Observation:
    deadline = time.monotonic() + limit  # a bound on a hang, not a measured time
    while (obs := await backend.observe(handle)).status != status:
        assert time.monotonic() < deadline, f"{handle} stayed {obs}"
        await asyncio.sleep(0.02)
    return obs
