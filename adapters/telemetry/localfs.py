"""Is a path on host-local storage? The collector's spool must be.

SQLite in WAL mode keeps its index in shared memory beside the database and relies on POSIX
locks and fsync; network and shared file systems do not keep those promises (SQLite's own
documentation says WAL does not work over a network file system), and a spool that is not
durable loses acknowledged-to-nobody metrics. The source logs may live anywhere: they are only
read.
"""

from __future__ import annotations

import os
from pathlib import Path

from domain.errors import InvalidInput

MOUNTINFO = Path("/proc/self/mountinfo")
NETWORK_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "ceph", "glusterfs", "lustre", "gpfs",
        "beegfs", "afs", "9p", "virtiofs", "fuse", "fuseblk", "davfs", "ocfs2", "gfs2",
    }
)  # fmt: skip


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 …)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: Path, mountinfo: str) -> tuple[str, str]:
    """(mount point, file system type) of the mount holding ``path`` (resolved)."""
    best = ("/", "")
    target = str(path)
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        point = _unescape(fields[4])
        fstype = right.split()[0]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


def is_network(fstype: str) -> bool:
    return fstype in NETWORK_TYPES or fstype.startswith("fuse.") or fstype.startswith("nfs")


def check_local(path: Path, mountinfo: Path = MOUNTINFO) -> None:
    """Refuse (InvalidInput) a ``path`` on a network or shared file system."""
    existing = path.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    resolved = Path(os.path.realpath(existing))
    try:
        text = mountinfo.read_text()
    except OSError:
        return  # not Linux, or no /proc: nothing to check against
    point, fstype = mount_of(resolved, text)
    if is_network(fstype):
        raise InvalidInput(
            f"the spool {path} is on {fstype} (mounted at {point}): a network or shared file "
            "system, where SQLite's locks and fsync cannot be trusted",
            fix="put --spool on a local disk of this host (the metric files themselves may "
            "stay on shared storage)",
            field="spool",
        )
