"""A member's CPU and memory use, read where its node daemon said (``UsageSource``: its
cgroup directories, else its first process's tree through ``/proc``; docs/telemetry.md, "The
system source").

CPU is reported in cores used over the last period (the growth of the cumulative CPU time
divided by the monotonic time between two reads); memory in MiB:

* cgroup v2 (a directory with ``cpu.stat``): ``usage_usec``; ``memory.current`` less the
  page cache that can be dropped (``inactive_file`` of ``memory.stat``), as ``docker stats``;
* cgroup v1: ``cpuacct.usage`` (ns) of the cpuacct directory; ``memory.usage_in_bytes`` less
  ``total_inactive_file`` of the memory directory;
* no cgroup for a quantity: the process tree of the pid (its descendants through each
  process's parent): user + system time of every process of the tree, with what its reaped
  children used (``cutime``/``cstime``); the sum of their resident sets (shared pages count
  once per process). A process that left the tree (a daemon re-parented to init) is no longer
  counted. The pid is pinned to the start time it had when first read: a pid reused by
  another process reads as nothing from then on.

Anything that cannot be read (a group removed mid-read, the process gone, a counter that went
backwards) gives None for that sample: never a guess.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from domain.telemetry import UsageSource

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ProcStat:
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime
    start: int  # start time, in ticks after boot
    rss_pages: int


def parse_stat(text: str) -> ProcStat | None:
    """``/proc/<pid>/stat``'s text (the command name may hold spaces and parentheses)."""
    _, sep, tail = text.rpartition(")")
    rest = tail.split()
    if not sep or len(rest) < 22:
        return None
    try:
        ticks = sum(int(rest[i]) for i in (11, 12, 13, 14))
        return ProcStat(int(rest[1]), ticks, int(rest[19]), int(rest[21]))
    except ValueError:
        return None


@dataclass
class ProcessTable:
    """``/proc`` read at most once per sample, shared by the members that need it."""

    proc: Path = Path("/proc")
    _stats: dict[int, ProcStat] | None = None

    def stats(self) -> dict[int, ProcStat]:
        if self._stats is None:
            self._stats = {}
            root = str(self.proc)
            with contextlib.suppress(OSError):
                names = [n for n in os.listdir(root) if n.isdigit()]
                for name in names:
                    try:  # plain os calls: this runs over every process of the host
                        fd = os.open(f"{root}/{name}/stat", os.O_RDONLY | os.O_CLOEXEC)
                    except OSError:
                        continue  # exited since the listing
                    try:
                        text = os.read(fd, 4096).decode(errors="replace")
                    except OSError:
                        continue
                    finally:
                        os.close(fd)
                    st = parse_stat(text)
                    if st is not None:
                        self._stats[int(name)] = st
        return self._stats

    def tree(self, pid: int) -> Iterator[ProcStat]:
        stats = self.stats()
        children: dict[int, list[int]] = {}
        for p, st in stats.items():
            children.setdefault(st.ppid, []).append(p)
        todo, seen = [pid], set()
        while todo:
            p = todo.pop()
            if p in seen or p not in stats:
                continue
            seen.add(p)
            yield stats[p]
            todo.extend(children.get(p, ()))


def _read(path: str) -> str:
    with open(path) as f:
        return f.read(1 << 16)


def _stat_field(text: str, key: str) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return None


def cgroup_cpu_seconds(directory: str) -> float | None:
    """The group's cumulative CPU time; None when this directory has no CPU accounting."""
    try:
        if os.path.exists(os.path.join(directory, "cpu.stat")):
            usec = _stat_field(_read(os.path.join(directory, "cpu.stat")), "usage_usec")
            if usec is not None:
                return usec / 1e6
        if os.path.exists(os.path.join(directory, "cpuacct.usage")):
            return int(_read(os.path.join(directory, "cpuacct.usage")).strip()) / 1e9
    except (OSError, ValueError):
        return None
    return None


def cgroup_memory_bytes(directory: str) -> float | None:
    """The group's memory in use, less the page cache it could drop; None when none."""
    for usage, inactive in (
        ("memory.current", "inactive_file"),
        ("memory.usage_in_bytes", "total_inactive_file"),
    ):
        try:
            if not os.path.exists(os.path.join(directory, usage)):
                continue
            used = int(_read(os.path.join(directory, usage)).strip())
            stat = _read(os.path.join(directory, "memory.stat"))
        except (OSError, ValueError):
            return None
        cache = _stat_field(stat, inactive) or 0
        return float(max(0, used - cache))
    return None


@dataclass
class UsageReader:
    """One member's CPU and memory, sample after sample."""

    source: UsageSource
    _last_cpu: tuple[float, str, float] | None = None  # (cpu seconds, whence, monotonic time)
    _pid_start: int | None = None
    _pid_lost: bool = False

    def read(self, now: float, table: ProcessTable) -> tuple[float | None, float | None]:
        """(cores used since the last read, MiB in use) at monotonic time ``now``."""
        cpu_total = self._cgroup(cgroup_cpu_seconds)
        memory = self._cgroup(cgroup_memory_bytes)
        kind = "cgroup"
        if cpu_total is None or memory is None:
            tree = self._tree(table)
            if tree is not None:
                ticks, rss = tree
                if cpu_total is None:
                    cpu_total, kind = ticks / _TICK, "tree"
                memory = float(rss * _PAGE) if memory is None else memory
        return self._cores(cpu_total, kind, now), None if memory is None else memory / MIB

    def _cgroup(self, read: Callable[[str], float | None]) -> float | None:
        for d in self.source.cgroups:
            value = read(d)
            if value is not None:
                return value
        return None

    def _tree(self, table: ProcessTable) -> tuple[int, int] | None:
        pid = self.source.pid
        if pid is None or self._pid_lost:
            return None
        root = table.stats().get(pid)
        if root is None:
            return None
        if self._pid_start is None:
            self._pid_start = root.start
        elif root.start != self._pid_start:  # another process has the pid now
            self._pid_lost = True
            return None
        ticks = rss = 0
        for st in table.tree(pid):
            ticks += st.cpu_ticks
            rss += st.rss_pages
        return ticks, rss

    def _cores(self, total: float | None, kind: str, now: float) -> float | None:
        last, self._last_cpu = self._last_cpu, None if total is None else (total, kind, now)
        if total is None or last is None or last[1] != kind or now <= last[2] or total < last[0]:
            return None  # the first read, a gap, another counter, or one that went back
        return (total - last[0]) / (now - last[2])
