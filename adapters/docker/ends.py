"""Why a local member's container is gone (docs/local-backend.md#an-engine-that-restarted).

The engine does not say when it started (neither ``GET /info`` nor ``GET /version`` carries it),
so its start time is read from the kernel: the process serving the engine's unix socket
(``SO_PEERCRED``) and its start time in ``/proc`` (clock ticks since boot, 10 ms). A member
whose container the engine no longer knows, and whose container was seen started before the
engine started, was lost with the engine (its data root gone with the machine or wiped on
restart): ``node-lost``. Without
both times (a TCP engine, a process in another PID namespace, a control plane that restarted
and never saw the container) nothing is proven and the member is ``missing`` as before
("cancelled outside TunePlane: its container disappeared from the engine").
"""

from __future__ import annotations

import os
import socket
import struct
import time
from datetime import UTC, datetime
from typing import Any

from domain.backend_ports import Observation


def started_at(info: dict[str, Any]) -> datetime | None:
    """The container's ``State.StartedAt`` (RFC 3339, nanoseconds), None when never started."""
    raw = str((info.get("State") or {}).get("StartedAt") or "")[:26].rstrip("Z")
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S"):
        try:
            at = datetime.strptime(raw, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return at if at.year >= 2000 else None  # the engine's zero time: never started
    return None


def gone(
    handle: str, engine_started: datetime | None, member_started: datetime | None
) -> Observation:
    """The observation of a member whose container the engine does not know (pure)."""
    if engine_started is None or member_started is None or engine_started <= member_started:
        return Observation("missing")
    return Observation(
        "missing",
        reason=f"the container engine restarted at {engine_started:%Y-%m-%d %H:%M:%S} UTC,"
        f" after container {handle[:12]} started ({member_started:%Y-%m-%d %H:%M:%S} UTC),"
        " and no longer knows it: lost with the engine",
        cause="node-lost",
    )


def process_started(stat: str, boot_time: float, ticks_per_second: int) -> datetime:
    """A process's start from its ``/proc/PID/stat`` line and when the machine booted (pure)."""
    fields = stat.rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    return datetime.fromtimestamp(boot_time + int(fields[19]) / ticks_per_second, UTC)


def engine_started_at(host: str) -> datetime | None:
    """When the process serving ``host`` (``unix://PATH``) started; None when that cannot be
    known from here. Blocking: call it in a thread."""
    if not host.startswith("unix://"):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(host[len("unix://") :])
            size = struct.calcsize("3i")
            pid, _, _ = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
            )
        if pid <= 0:  # the peer is in a PID namespace this process cannot see
            return None
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        # the boot to the microsecond: /proc/stat's ``btime`` is whole seconds (truncated), which
        # put an engine's start up to a second early and took a restart less than a second after
        # a container's start for one before it (CI, session 48: 0.85 s on that machine)
        boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        return process_started(stat, boot, os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
