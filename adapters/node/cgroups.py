"""CPU and memory limits of host-process members through cgroups (docs/node-backend.md,
"Host processes").

Each member gets ``tuneplane/<node>/<member>`` under the host's cgroup hierarchy: cgroup v2 where
the host's unified hierarchy offers the ``cpu`` and ``memory`` controllers (``cpu.max``,
``memory.max``, no swap; ``cgroup.kill`` ends every process in it, even those that left its
process group); else cgroup v1 where its ``cpu`` and ``memory`` hierarchies are mounted and
writable (a hybrid host: ``cpu.cfs_quota_us``, ``memory.limit_in_bytes``); else none, and the
daemon says so at its start: members then run without limits (their processes are still ended
by process group). What the member's processes used and whether the kernel's OOM killer ended
one is read from the same directories.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tuneplane.node.cgroups")

BASE = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
MIB = 1024 * 1024


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where members' cgroups are made on this host: ``mode`` is "v2", "v1" or "none"
    (``why`` says why none)."""

    mode: str
    v2: Path | None = None  # the unified hierarchy's mount
    cpu: Path | None = None  # v1: the cpu controller's mount
    memory: Path | None = None  # v1: the memory controller's mount
    cpuacct: Path | None = None  # v1: the cpuacct controller's mount, where apart from cpu's
    why: str = ""

    def describe(self) -> str:
        if self.mode == "v2":
            return f"cgroup v2 at {self.v2}"
        if self.mode == "v1":
            return f"cgroup v1 ({self.cpu}, {self.memory})"
        return f"none ({self.why}): members run without CPU and memory limits"

    # -- one member's cgroup --------------------------------------------------------------

    def make(self, node: str, member: str, cpus: float, memory_mb: int) -> tuple[str, ...]:
        """Make the member's cgroup directories with its limits; their paths (the member's
        processes are put into each). OSError when the host refuses."""
        if self.mode == "v2" and self.v2 is not None:
            parent = self.v2
            for part in ("tuneplane", node):
                controllers = _read(parent / "cgroup.controllers").split()
                wanted = " ".join(f"+{c}" for c in ("cpu", "memory") if c in controllers)
                if wanted:
                    _write(parent / "cgroup.subtree_control", wanted)
                parent = parent / part
                parent.mkdir(exist_ok=True)
            _write(parent / "cgroup.subtree_control", "+cpu +memory")
            group = parent / member
            group.mkdir(exist_ok=True)
            _write(group / "cpu.max", f"{max(1000, int(cpus * PERIOD_US))} {PERIOD_US}")
            _write(group / "memory.max", str(memory_mb * MIB))
            with contextlib.suppress(OSError):
                _write(group / "memory.swap.max", "0")
            return (str(group),)
        if self.mode == "v1" and self.cpu is not None and self.memory is not None:
            cpu = self.cpu / "tuneplane" / node / member
            memory = self.memory / "tuneplane" / node / member
            cpu.mkdir(parents=True, exist_ok=True)
            memory.mkdir(parents=True, exist_ok=True)
            _write(cpu / "cpu.cfs_period_us", str(PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(max(1000, int(cpus * PERIOD_US))))
            _write(memory / "memory.limit_in_bytes", str(memory_mb * MIB))
            with contextlib.suppress(OSError):  # absent without swap accounting
                _write(memory / "memory.memsw.limit_in_bytes", str(memory_mb * MIB))
            made: tuple[str, ...] = (str(cpu), str(memory))
            if self.cpuacct is not None:  # its CPU use is read there (docs/telemetry.md)
                acct = self.cpuacct / "tuneplane" / node / member
                acct.mkdir(parents=True, exist_ok=True)
                made += (str(acct),)
            return made
        return ()


def pids(dirs: tuple[str, ...]) -> set[int]:
    """Every process in the member's cgroups."""
    found: set[int] = set()
    for d in dirs:
        for line in _read(Path(d) / "cgroup.procs").split():
            if line.isdigit():
                found.add(int(line))
    return found


def oom_kills(dirs: tuple[str, ...]) -> int:
    """How many of the member's processes the kernel's OOM killer ended (v2 ``memory.events``,
    v1 ``memory.oom_control``: both say ``oom_kill N``)."""
    total = 0
    for d in dirs:
        for name in ("memory.events", "memory.oom_control"):
            for line in _read(Path(d) / name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    total += int(value)
    return total


def kill(dirs: tuple[str, ...], wait: float = 5.0) -> None:
    """SIGKILL every process in the member's cgroups (``cgroup.kill`` where v2 has it), until
    none is left or ``wait`` seconds passed."""
    for d in dirs:
        with contextlib.suppress(OSError):
            _write(Path(d) / "cgroup.kill", "1")
    deadline = time.monotonic() + wait
    while (left := pids(dirs)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def remove(dirs: tuple[str, ...]) -> None:
    """Remove the member's (empty) cgroups; one that still holds a process stays."""
    for d in dirs:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cgroup %s not removed: %s", d, exc)


def detect(node: str, base: Path = BASE) -> CgroupHost:
    """The cgroup hierarchy members' limits can be set in, tried by making the node's own
    directory (then left in place for its members)."""
    for v2 in (base, base / "unified"):
        controllers = _read(v2 / "cgroup.controllers").split()
        if "cpu" in controllers and "memory" in controllers:
            host = CgroupHost("v2", v2=v2)
            try:
                probe = host.make(node, ".probe", 1.0, 64)
                remove(probe)
                return host
            except OSError as exc:
                return CgroupHost("none", why=f"cgroup v2 at {v2} refused a sub-tree: {exc}")
    cpu = next(
        (base / n for n in ("cpu", "cpu,cpuacct") if (base / n / "cpu.shares").exists()), None
    )
    memory = base / "memory"
    if cpu is not None and (memory / "memory.limit_in_bytes").exists():
        acct = base / "cpuacct"
        apart = (acct / "cpuacct.usage").exists() and not (cpu / "cpuacct.usage").exists()
        host = CgroupHost("v1", cpu=cpu, memory=memory, cpuacct=acct if apart else None)
        try:
            remove(host.make(node, ".probe", 1.0, 64))
            return host
        except OSError as exc:
            return CgroupHost("none", why=f"cgroup v1 refused a sub-tree: {exc}")
    return CgroupHost("none", why="no cgroup hierarchy with cpu and memory controllers")
