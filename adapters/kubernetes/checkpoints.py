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

import base64
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


def wrapped(command: list[str], attempt: int, shell_safe: bool = False) -> list[str]:
    """``command`` started by the checkpoint step (``-I``: the job's PYTHON* variables and the
    working directory do not reach the step; the command gets the environment as it is).

    ``shell_safe``: the step's source in base64, for a RayJob's entrypoint, which goes through
    three parsers before it runs: KubeRay's submitter puts it unquoted into a ``bash -c``
    line, ``ray job submit`` joins its arguments again with ``subprocess.list2cmdline``
    (Windows quoting), and Ray's job supervisor runs that with ``/bin/sh``; the step's source
    (backticks, backslashes, quotes) would not survive them. Base64 and this one-line loader
    hold nothing any of them changes (tests/unit/test_kubernetes_checkpoints.py runs it
    through the same three)."""
    code = STEP
    if shell_safe:
        encoded = base64.b64encode(STEP.encode()).decode()
        code = f"exec(__import__('base64').b64decode('{encoded}'), {{'__name__': '__main__'}})"
    return ["python3", "-I", "-c", code, MOUNT, str(attempt), "--", *command]
