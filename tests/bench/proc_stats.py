"""What the benchmarks read about processes from /proc: CPU seconds, resident memory, a
process's children, the load average (Linux only, as the benchmarks are)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | Path) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces)."""
    path = pid if isinstance(pid, Path) else Path(f"/proc/{pid}/stat")
    return path.read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far; 0 once it is gone."""
    try:
        fields = _stat(pid)
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            if int(_stat(stat)[1]) == pid:
                kids.append(int(stat.parent.name))
    return kids


def family(root: int) -> list[int]:
    """``root`` and its children (PostgreSQL's backends)."""
    return [root, *children(root)]


def tree_cpu_seconds(pid: int) -> float:
    """CPU of ``pid``, its live children and its reaped ones (PostgreSQL: the postmaster)."""
    fields = _stat(pid)
    total = sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime
    return total + sum(cpu_seconds(kid) for kid in children(pid))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
