"""Checkpoints on a declared volume (docs/checkpoints.md#the-kubernetes-backend-built): what the
renderer adds to a member's pod when its pool names a ``checkpoint_claim``. No I/O but reading
the in-pod step's source once.

The claim's folder ``<job id>/`` is mounted (``subPath``) at ``MOUNT`` in every member of every
attempt of the job; ``TUNEPLANE_CHECKPOINT_DIR`` is ``MOUNT/<attempt number>``. The training
container's command is wrapped by the checkpoint step (``adapters/checkpoint_step.py``, given
inline to the image's ``python3``), which finds, verifies and collects the earlier attempts'
checkpoints there and starts the command with ``TUNEPLANE_RESUME_FROM`` set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters import checkpoint_step
from domain.checkpoints import CHECKPOINT_ENV
from domain.errors import InvalidInput

Obj = dict[str, Any]
MOUNT = "/tuneplane/checkpoints"  # the job's folder of the claim; one folder per attempt in it
VOLUME = "checkpoints"
MANIFESTS_ENV = "TUNEPLANE_CHECKPOINT_MANIFESTS"  # adapters/sdk/report.py reads it
STEP = Path(checkpoint_step.__file__).read_text()


def volume(claim: str) -> Obj:
    return {"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}


def mount(job_id: str) -> Obj:
    """The job's folder of the claim (the kubelet makes it when missing)."""
    if not job_id or "/" in job_id or job_id in (".", "..") or job_id.startswith("."):
        raise InvalidInput(
            f"job id {job_id!r} cannot name a folder of the checkpoint claim",
            fix="check the job id",
        )
    return {"name": VOLUME, "mountPath": MOUNT, "subPath": job_id}


def env(attempt: int) -> dict[str, str]:
    """The attempt's folder; and the SDK's ``report.checkpoint`` writes each checkpoint's
    manifest as it completes (what the next attempt verifies against)."""
    return {CHECKPOINT_ENV: f"{MOUNT}/{attempt}", MANIFESTS_ENV: "1"}


def wrapped(command: list[str], attempt: int) -> list[str]:
    """``command`` started by the checkpoint step (``-I``: the job's PYTHON* variables and the
    working directory do not reach the step; the command gets the environment as it is)."""
    return ["python3", "-I", "-c", STEP, MOUNT, str(attempt), "--", *command]
