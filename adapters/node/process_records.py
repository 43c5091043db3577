"""A host-process member's records on disk (``adapters/node/processes.py``): what it is
(``member.json``, as a container's labels say), when and as what it started (``started.json``,
written by its shim), and what can be proved from them and the host (is its process still the
one recorded, is its supervisor alive)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from adapters.node.process_shim import boot_id, start_time
from domain.node_messages import PrepareOrder


def machine_id() -> str:
    try:
        return Path("/etc/machine-id").read_text().strip()
    except OSError:
        return ""


def member_record(order: PrepareOrder, node: str, groups: tuple[str, ...]) -> dict[str, Any]:
    ref = order.ref
    return {
        "node": node,
        "installation": order.installation,
        "ref": {
            "attempt_id": ref.attempt_id,
            "member_id": ref.member_id,
            "index": ref.index,
            "epoch": ref.epoch,
        },
        "job_id": order.job_id,
        "image": order.image,
        "gpu_indices": list(order.gpu_indices),
        "cpus": order.cpus,
        "memory_mb": order.memory_mb,
        "metrics": bool(order.collector_token),
        "cgroups": list(groups),
    }


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def alive(started: dict[str, Any]) -> bool:
    """The recorded member process still runs: same boot, same pid, same start time."""
    if started.get("boot_id") != boot_id():
        return False
    pid, when = started.get("pid"), started.get("start")
    return isinstance(pid, int) and when is not None and start_time(pid) == when


def signal_group(started: dict[str, Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(started["pid"]), sig)


def supervised(path: Path) -> bool:
    """Its shim holds the lock: a supervisor is alive."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: never delays a shim's own
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def read_from(path: Path, offset: int, size: int = 1 << 16) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)
    except FileNotFoundError:
        return b""
