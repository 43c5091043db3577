"""Where a process's CPU and memory use can be read: its control groups' directories on this
host (``domain.telemetry.UsageSource``; the collector reads them: docs/telemetry.md).

``/proc/<pid>/cgroup`` names the process's group in each hierarchy, ``/proc/self/mountinfo``
where each hierarchy is mounted. A cgroup v2 host has one hierarchy (``0::/path``); a v1 or
hybrid host one per controller set (``4:memory:/docker/…``, ``3:cpu,cpuacct:/docker/…``), and
on a hybrid host an unused v2 hierarchy besides (``/sys/fs/cgroup/unified``): there the v1
``cpuacct`` and ``memory`` directories are named, since the v2 one holds no controllers. The
root group (``/``) is never named: it is everybody's, not the member's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from domain.telemetry import UsageSource

V1_CONTROLLERS = ("cpuacct", "memory")
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Hierarchy:
    mount: str  # where it is mounted here
    root: str  # the group of the hierarchy that is mounted there ("/" unless a bind mount)
    controllers: frozenset[str]  # v1 controllers; empty for v2
    v2: bool


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def hierarchies(mountinfo: str) -> list[Hierarchy]:
    """The cgroup hierarchies mounted, from ``/proc/self/mountinfo``'s text."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        if fstype == "cgroup2":
            found.append(Hierarchy(_unescape(fields[4]), _unescape(fields[3]), frozenset(), True))
        elif fstype == "cgroup":
            wanted = frozenset(o for o in options if o in V1_CONTROLLERS)
            if wanted:
                found.append(Hierarchy(_unescape(fields[4]), _unescape(fields[3]), wanted, False))
    return found


def _below(mount: str, root: str, path: str) -> str | None:
    """The directory of group ``path`` under a hierarchy mounted at ``mount`` (its group
    ``root`` mounted there); None when the group is not visible through that mount."""
    root = root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    if not rel or ".." in rel.split("/"):
        return None  # the root group (everybody's), or a path that is not a group's
    return os.path.join(mount, rel)


def cgroup_dirs(proc_cgroup: str, mounts: list[Hierarchy]) -> tuple[str, ...]:
    """The directories of the groups ``/proc/<pid>/cgroup``'s text names: the v1 ``cpuacct``
    and ``memory`` ones where the host has them, else the v2 one; () when none is the
    process's own (all in the root group)."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if names == "":
            for h in mounts:
                if h.v2 and v2 is None:
                    v2 = _below(h.mount, h.root, path)
            continue
        for h in mounts:
            if not h.v2 and h.controllers & set(names.split(",")):
                where = _below(h.mount, h.root, path)
                if where is not None:
                    for c in h.controllers & set(names.split(",")):
                        v1.setdefault(c, where)
    if v1:
        return tuple(dict.fromkeys(v1[c] for c in V1_CONTROLLERS if c in v1))
    return (v2,) if v2 is not None else ()


def usage_source_of(pid: int, proc: Path = Path("/proc")) -> UsageSource | None:
    """Where process ``pid`` (of this host's pid namespace) can be measured; None when it is
    gone. Directories that do not exist (a group removed meanwhile) are left out."""
    try:
        own = (proc / str(pid) / "cgroup").read_text()
        mounts = hierarchies((proc / "self" / "mountinfo").read_text())
    except OSError:
        return None
    dirs = tuple(d for d in cgroup_dirs(own, mounts) if os.path.isdir(d))
    return UsageSource(pid, dirs)
