"""Pure translations between TunePlane's launch model and the Engine API's JSON.

No I/O here: :func:`container_config` builds the ``POST /containers/create`` body from a
``LaunchRequest`` (through :func:`create_body`, which the node daemon's executor calls with
plain values); :func:`observation` reads ``GET /containers/{id}/json`` into an
``Observation``; :func:`source_tar` checks and unpacks the member's source archive.
"""

from __future__ import annotations

import gzip
import io
import json
import signal
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from domain.artifacts import OUTPUT_DIR, OUTPUT_ENV
from domain.capsule import DIGEST_ENV, IMAGE_ENV, RUNNER, runner_failure
from domain.checkpoints import CHECKPOINT_ENV, CHECKPOINT_MOUNT, RESUME_ENV, RESUME_MOUNT
from domain.errors import InvalidInput
from domain.ports import LaunchRequest, Observation
from domain.progress import signal_words
from domain.requests import require_limits
from domain.threads import thread_env

WORKDIR = "/workspace"
LABEL_JOB = "tuneplane.job"
LABEL_ATTEMPT = "tuneplane.attempt"
LABEL_MEMBER = "tuneplane.member"
LABEL_INDEX = "tuneplane.member-index"
LABEL_NODE = "tuneplane.node"  # the node daemon that holds it (node backend)
LABEL_EPOCH = "tuneplane.epoch"  # its node's fencing epoch when it was placed
NEVER = "0001-01-01T00:00:00Z"
_SHELL_CODES = {
    126: "exit code 126: command not executable",
    127: "exit code 127: command not found",
}  # the engine's "StartedAt" of a container never started


def checkpoint_mounts(
    env: dict[str, str], work: str, resume_root: str | None, resume: str | None
) -> list[str]:
    """The binds of an attempt's checkpoint directory (read-write) and resume directory
    (read-only), with ``env`` set to match (docs/checkpoints.md)."""
    env[CHECKPOINT_ENV] = CHECKPOINT_MOUNT
    env[RESUME_ENV] = ""
    binds = [f"{work}:{CHECKPOINT_MOUNT}"]
    if resume_root is not None:
        binds.append(f"{resume_root}:{RESUME_MOUNT}:ro")
        if resume is not None:
            env[RESUME_ENV] = f"{RESUME_MOUNT}/{resume}"
    return binds


def container_name(member_id: str) -> str:
    return f"tp-{member_id}"


def container_config(
    request: LaunchRequest,
    *,
    network_mode: str,
    init: bool,
    host_cpus: int | None,
) -> dict[str, Any]:
    """The create body. ``host_cpus`` caps the CPU quota (the engine refuses more than it has)."""
    spec = request.spec
    env = dict(spec.env)
    cpus = min(spec.resources.cpus, host_cpus) if host_cpus else spec.resources.cpus
    env.update(thread_env(cpus, spec.resources.gpus, spec.env))
    env.update(
        TUNEPLANE_JOB_ID=request.job_id,
        TUNEPLANE_ATTEMPT_ID=request.attempt_id,
        TUNEPLANE_ATTEMPT=str(request.attempt),
        TUNEPLANE_MEMBER_INDEX=str(request.member_index),
    )
    command = spec.command
    if spec.capsule is not None:  # the runner checks the capsule, then runs the command
        command = ("/bin/sh", RUNNER)
        env[DIGEST_ENV] = spec.capsule.digest
        env[IMAGE_ENV] = spec.runtime.digest  # the image created below, as the runner checks
    binds = []
    if request.outputs is not None:  # the member's output directory on this host
        binds.append(f"{request.outputs}:{OUTPUT_DIR}")
        env[OUTPUT_ENV] = OUTPUT_DIR
    if request.checkpoints is not None:  # docs/checkpoints.md
        binds += checkpoint_mounts(env, request.checkpoints, request.resume_root, request.resume)
    devices = None
    if spec.resources.gpus > 0:
        devices = [{"Driver": "nvidia", "Count": spec.resources.gpus, "Capabilities": [["gpu"]]}]
    return create_body(
        image=spec.runtime.digest,  # the pinned image id: exactly what was previewed
        command=command,
        env=env,
        labels=member_labels(
            request.job_id, request.attempt_id, request.member_id, request.member_index
        ),
        cpus=spec.resources.cpus,
        memory_mb=spec.resources.memory_mb,
        network_mode=network_mode,
        init=init,
        host_cpus=host_cpus,
        device_requests=devices,
        binds=binds,
    )


def member_labels(job_id: str, attempt_id: str, member_id: str, index: int) -> dict[str, str]:
    """The ``tuneplane.*`` labels every member's container carries."""
    return {
        LABEL_JOB: job_id,
        LABEL_ATTEMPT: attempt_id,
        LABEL_MEMBER: member_id,
        LABEL_INDEX: str(index),
    }


def gpus_by_index(indices: Sequence[int]) -> list[dict[str, Any]]:
    """``DeviceRequests`` binding exactly these GPUs (by nvidia-smi index)."""
    return [
        {
            "Driver": "nvidia",
            "DeviceIDs": [str(i) for i in indices],
            "Capabilities": [["gpu"]],
        }
    ]


def create_body(
    *,
    image: str,
    command: Sequence[str],
    env: Mapping[str, str],
    labels: Mapping[str, str],
    cpus: float,
    memory_mb: int,
    network_mode: str,
    init: bool,
    host_cpus: int | None,
    device_requests: list[dict[str, Any]] | None = None,
    binds: Sequence[str] = (),
) -> dict[str, Any]:
    """A ``POST /containers/create`` body: runs ``command`` in :data:`WORKDIR`, never restarted,
    no swap beyond ``memory_mb``; ``host_cpus`` caps ``cpus`` (the engine refuses more).
    InvalidInput, before anything is created, when ``cpus`` or ``memory_mb`` is below what a
    limit can be (``domain.requests.below_floor``): no container runs without limits."""
    require_limits(cpus, memory_mb, f"container {labels.get(LABEL_MEMBER, image)}")
    if host_cpus:
        cpus = min(cpus, float(host_cpus))
    host: dict[str, Any] = {
        "NetworkMode": network_mode,
        "Init": init,
        "RestartPolicy": {"Name": "no"},
        "NanoCpus": round(cpus * 1e9),  # never 0: the engine reads 0 as "no limit"
        "Memory": memory_mb * 1024 * 1024,
        "MemorySwap": memory_mb * 1024 * 1024,  # no swap beyond the limit
    }
    if device_requests:
        host["DeviceRequests"] = device_requests
    if binds:
        host["Binds"] = list(binds)
    return {
        "Image": image,
        "Cmd": list(command),
        "Env": [f"{k}={v}" for k, v in env.items()],
        "WorkingDir": WORKDIR,
        "Labels": dict(labels),
        "Tty": False,
        "OpenStdin": False,
        "AttachStdin": False,
        "HostConfig": host,
    }


def never_started(info: dict[str, Any]) -> bool:
    """Created, no start attempted yet (a failed start leaves ``State.Error`` set)."""
    state = info.get("State") or {}
    return (
        state.get("Status") in ("created", "configured")
        and not state.get("Error")
        and state.get("StartedAt", NEVER) in (NEVER, "", None)
    )


def _reason(state: dict[str, Any], code: int | None) -> str:
    return exit_reason(code, oom=bool(state.get("OOMKilled")), error=str(state.get("Error") or ""))


def exit_reason(code: int | None, *, oom: bool = False, error: str = "") -> str:
    """Why a member's process ended, in words: the OOM killer, the start's error, the shell's
    and the runner's own codes, else the signal that ended it ("" for an ordinary exit)."""
    if oom:
        return "OOMKilled"
    if error:
        return error
    if code in _SHELL_CODES:
        return _SHELL_CODES[code]
    runner = runner_failure(code)
    if runner is not None:
        return runner
    return signal_words(code) or ""


def observation(info: dict[str, Any]) -> Observation:
    state = info.get("State") or {}
    status = str(state.get("Status", "")).lower()
    code = state.get("ExitCode")
    code = int(code) if code is not None else None
    if status in ("created", "configured", "initialized"):
        if state.get("Error"):  # the start failed (e.g. command not found): it will never run
            return Observation("exited", code or 128, _reason(state, code))
        return Observation("starting")
    if status in ("running", "paused", "restarting"):
        return Observation("running")
    return Observation("exited", code, _reason(state, code))


def source_tar(source: bytes) -> bytes:
    """The uncompressed tar to unpack into the working directory; InvalidInput if unreadable."""
    data = source
    try:
        if source[:2] == b"\x1f\x8b":
            data = gzip.decompress(source)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.name.startswith("/") or ".." in member.name.split("/"):
                    raise InvalidInput(
                        f"the source archive holds an unsafe path {member.name!r}",
                        fix="build the archive with relative paths inside the experiment dir",
                        field="intent.source",
                    )
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise InvalidInput(
            f"the source archive is not a readable (gzip) tar: {exc}",
            fix="upload a .tar.gz of the experiment directory (`tp submit` builds one)",
            field="intent.source",
        ) from None
    return data


def workspace_tar() -> bytes:
    """A tar holding only the working directory itself, unpacked at ``/`` to create it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(WORKDIR.strip("/"))
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)
    return buf.getvalue()


OOM_SETTLE_SECONDS = 2.0  # how long after an exit by SIGKILL the engine may still say OOMKilled


def oom_unsettled(info: dict[str, Any], now: datetime) -> bool:
    """An exit by SIGKILL (137) the engine has not (yet) put down to the OOM killer, less than
    ``OOM_SETTLE_SECONDS`` after it: on cgroup v2 the engine can learn of the OOM kill after the
    exit (moby's OOM event races the exit event), so the exit is looked at again shortly
    instead of recorded without its cause."""
    state = info.get("State") or {}
    if state.get("ExitCode") != 137 or state.get("OOMKilled"):
        return False
    raw = str(state.get("FinishedAt") or "")[:19]  # RFC 3339 with nanoseconds
    try:
        finished = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return False
    return (now - finished).total_seconds() < OOM_SETTLE_SECONDS + 1  # whole seconds read


def killed(info: dict[str, Any]) -> bool:
    """Ended by a signal (exit code above 128) that was not the kernel's OOM killer."""
    state = info.get("State") or {}
    code = state.get("ExitCode")
    return isinstance(code, int) and code > 128 and not state.get("OOMKilled")


def event_window(info: dict[str, Any]) -> tuple[int, int] | None:
    """Whole seconds since the epoch around the container's run (start − 1, end + 2), for the
    engine's events query; None when the engine did not record both times."""
    state = info.get("State") or {}
    times = []
    for key in ("StartedAt", "FinishedAt"):
        raw = str(state.get(key) or "")[:19]  # RFC 3339 with nanoseconds: whole seconds
        try:
            at = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            return None
        if at.year < 2000:  # the engine's zero time: never started or never finished
            return None
        times.append(int(at.timestamp()))
    return times[0] - 1, times[1] + 2


def killed_by(events: bytes) -> str:
    """Who ended a container, from the engine's events for it (one JSON object a line):
    ``docker stop (SIGTERM)``, ``docker kill (SIGKILL)``, or "" when no stop or kill is there."""
    actions: list[str] = []
    signals: list[str] = []
    for line in events.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        action = str(event.get("Action") or event.get("status") or "")
        attributes = (event.get("Actor") or {}).get("Attributes") or {}
        if action in ("stop", "kill"):
            actions.append(action)
        if action == "kill":
            signals.append(_signal_name(str(attributes.get("signal", ""))))
    if not actions:
        return ""
    how = "docker stop" if "stop" in actions else "docker kill"
    named = ", ".join(dict.fromkeys(s for s in signals if s))
    return f"{how} ({named})" if named else how


def _signal_name(raw: str) -> str:
    if raw.isdigit():
        try:
            return signal.Signals(int(raw)).name
        except ValueError:
            return f"signal {raw}"
    return raw[:32]
