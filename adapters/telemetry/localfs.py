"""Is a path on host-local storage? The collector's spool must be.

The spool is SQLite in WAL mode: it keeps its wal-index in a memory-mapped ``-shm`` file beside
the database and relies on POSIX advisory locks and on ``fsync`` reaching the disk. Network and
shared file systems do not keep those promises: SQLite's own documentation says WAL does not
work over a network file system (the shared memory is not shared between hosts), NFS and SMB
locks are advisory at best and lost on a server restart, and FUSE file systems do whatever their
daemon does with ``fsync`` (s3fs and gcsfuse upload on close). A spool there may lose or
corrupt metrics that nobody has acknowledged yet, so ``check_local`` refuses it. The metric files
themselves may live anywhere: the collector only reads them.

Refused file system types (``NETWORK_TYPES``, plus every ``fuse.*`` subtype and ``nfs*``):
NFS (nfs, nfs4), SMB/CIFS (cifs, smb3, smbfs), NCP (ncpfs), AFS (afs), Coda (coda), CephFS
(ceph), GlusterFS (glusterfs), Lustre (lustre), IBM Spectrum Scale (gpfs), BeeGFS (beegfs),
OrangeFS (orangefs, pvfs2), Panasas (panfs), WekaFS (wekafs), the cluster file systems OCFS2 and
GFS2 (ocfs2, gfs2), the VM shares 9p, virtiofs and vboxsf, WebDAV (davfs), and every FUSE
mount (fuse, fuseblk, fuse.sshfs, fuse.s3fs, fuse.gcsfuse, fuse.juicefs, …).
"""

from __future__ import annotations

import os
from pathlib import Path

from domain.errors import InvalidInput

MOUNTINFO = Path("/proc/self/mountinfo")
NETWORK_TYPES = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "coda", "ceph", "glusterfs",
        "lustre", "gpfs", "beegfs", "orangefs", "pvfs2", "panfs", "wekafs", "ocfs2", "gfs2",
        "9p", "virtiofs", "vboxsf", "davfs", "fuse", "fuseblk",
    }
)  # fmt: skip
_OCTAL = frozenset("01234567")


def unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal (``\\040`` …)."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and set(code) <= _OCTAL:
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: str, mountinfo: str) -> tuple[str, str]:
    """(mount point, file system type) of the mount holding the absolute, resolved ``path``.

    The longest mount point that contains ``path`` wins; of equal ones (a mount on top of
    another at the same place), the later line, which is the one on top.
    """
    best = ("/", "")
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = unescape(fields[4])
        fstype = right.split()[0]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fstype)
    return best


def is_network(fstype: str) -> bool:
    return fstype in NETWORK_TYPES or fstype.startswith(("fuse.", "nfs"))


def check_local(path: Path, mountinfo: Path = MOUNTINFO) -> None:
    """Refuse (InvalidInput) a ``path`` on a network or shared file system.

    A path that does not exist yet is judged by its nearest existing parent, symlinks resolved.
    Where there is no mountinfo to read (not Linux), nothing is refused.
    """
    existing, rest = path.expanduser().absolute(), []
    while not existing.exists() and existing != existing.parent:
        rest.append(existing.name)
        existing = existing.parent
    resolved = os.path.join(os.path.realpath(existing), *reversed(rest))
    try:
        text = mountinfo.read_text(errors="replace")
    except OSError:
        return
    point, fstype = mount_of(resolved, text)
    if is_network(fstype):
        raise InvalidInput(
            f"the spool {path} is on a {fstype} file system (mounted at {point}): a network or "
            "shared file system, where SQLite's WAL locking and fsync cannot be trusted",
            fix="put --spool on a local disk of this host, e.g. under /var/lib (the metric "
            "files themselves may stay on shared storage)",
            field="spool",
        )
