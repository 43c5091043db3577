"""Blob files on a filesystem (``adapters/blobs.py``): the store's own copy of a file hashed
once, and later handed out without a second hash pass when it provably has not changed since
(docs/checkpoints.md, "What the hand-over costs").

**Hashing a copy once.** ``put_file`` copies a checkpoint's file into a temporary file of the
store (the kernel copies it), then ``hash_copy`` here: the copy is made read-only, its
modification time set ``BACKDATE_NS`` into the past, and it is hashed while another thread has
the kernel write it to disk (``fsync``; a small copy is synced with its rename, ``durable``: the
checkpoint is recorded, and its attempt's directory removed, only once its blobs are on
disk). The digest is that of the bytes stored: the workload's file may change meanwhile, the
store's copy is open nowhere else.

**The stamp.** Once the copy is in place under its digest, the store keeps in memory (never on
disk: nothing outside this process can forge it) its stamp: device, inode, size, mtime and
ctime, and when it was hashed. A file whose ``stat`` still equals its stamp holds the bytes
that were hashed, because every way of changing them leaves a mark the stamp sees:

- a write, a truncation, a write through a shared mapping set the mtime to the current time,
  which cannot equal the one set in the past, however coarse the filesystem's clock (the
  kernel's timestamps tick every few milliseconds on an older kernel: a write in the same tick
  as the hash would otherwise keep the mtime);
- setting the mtime back (``utime``), ``chmod``, a new link set the ctime to the current time,
  and nobody can set a ctime;
- replacing the file (a rename over it, a delete and a new file) gives another inode, with
  another mtime.

``copy_to`` then links the file into the new attempt's resume directory without reading it,
when its stamp matches and is younger than the store's ``stamp_seconds`` (10 minutes by
default; 0: every ``copy_to`` hashes). Anything else (no stamp: another process hashed it, or
this one restarted; a stamp that no longer matches; an old one) is hashed in full first, as
before, and stamped then if its mtime lies ``BACKDATE_NS`` or more before that hash began (a
blob written more recently is hashed every time). The file placed is the very inode checked
(linked through ``/proc/self/fd``, or copied from the open file), and its size and mtime are
checked again once it is placed; the link's new ctime then goes into the stamp.

**What the stamp does not cover** (the full hash after the stamp's age, or in another process,
still does): damage below the filesystem (a failing disk, flipped bits in memory or on the
medium, writes to the raw block device), which changes no time; within the stamp's age the
blob's pages are most likely still in the page cache, where a second hash pass would read them
too and find nothing either. A writer that asks the kernel not to update times (``O_NOCMTIME``:
the file's owner or root, for backup tools) or someone who sets the system clock back to forge a
ctime. On a network filesystem the stamp is as good as the attributes ``stat`` returns: NFS
revalidates them when a file is opened (close-to-open consistency), which ``copy_to`` does
first, unless the store is mounted ``nocto``; a store shared that way should run with
``stamp_seconds=0`` (not a setting yet).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

BACKDATE_NS = 10 * 1_000_000_000  # a stored copy's mtime, this far before it is hashed
STAMP_SECONDS = 600.0  # how long a stamp spares copy_to its hash pass
STAMPS_KEPT = 65_536  # stamps held (the oldest forgotten first): a few MiB
SYNC_WHILE_HASHING = 4 * 1024 * 1024  # a copy this large is written to disk while hashed
_CHUNK = 1024 * 1024  # read size when hashing (fits the caches better than larger reads)


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a blob file's ``stat`` said once its bytes were hashed."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Stamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def same_bytes(self, other: Stamp) -> bool:
        """The same file with the same content, whatever happened to its metadata (a link
        TunePlane made itself changes the ctime)."""
        return (self.device, self.inode, self.size, self.mtime_ns) == (
            other.device,
            other.inode,
            other.size,
            other.mtime_ns,
        )


class Stamps:
    """The stamps of blobs this process hashed, by digest (thread-safe: the store hashes and
    hands out files in worker threads)."""

    def __init__(self, seconds: float = STAMP_SECONDS, kept: int = STAMPS_KEPT) -> None:
        self.seconds = seconds
        self.kept = kept
        self._lock = threading.Lock()
        self._held: OrderedDict[str, tuple[Stamp, float]] = OrderedDict()

    def record(self, digest: str, stamp: Stamp, hashed_at: float | None = None) -> None:
        """``stamp`` for ``digest``, hashed at ``hashed_at`` (``time.monotonic()``; now by
        default)."""
        if self.seconds <= 0:
            return
        at = time.monotonic() if hashed_at is None else hashed_at
        with self._lock:
            self._held[digest] = (stamp, at)
            self._held.move_to_end(digest)
            while len(self._held) > self.kept:
                self._held.popitem(last=False)

    def hashed_at(self, digest: str, stamp: Stamp) -> float | None:
        """When the file ``stamp`` describes was hashed, if its stamp still matches and is young
        enough to spare the hash; else None."""
        with self._lock:
            held = self._held.get(digest)
        if held is None or held[0] != stamp or time.monotonic() - held[1] >= self.seconds:
            return None
        return held[1]

    def forget(self, digest: str) -> None:
        with self._lock:
            self._held.pop(digest, None)


class NotRegular(Exception):
    """The file to store is not a regular file (a symbolic link, a pipe, a device), or not
    where it was listed (one of its directories swapped for a link)."""


def open_regular(path: str, beneath: str | None = None) -> int:
    """A descriptor of the regular file ``path``, for reading. Raises NotRegular for anything
    but a regular file, a symbolic link included (one put there after the file was listed: what
    it points at is not the workload's); and, given ``beneath`` (a directory whose parent this
    process trusts: a checkpoint in the attempt's directory), for a file that is not under it
    once opened (one of its directories swapped for a link to elsewhere after it was listed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(f"{path} is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(f"{path} is not a regular file (a pipe, a device, a directory)")
        if beneath is not None:
            parent, name = os.path.split(beneath.rstrip(os.sep))
            base = os.path.join(os.path.realpath(parent), name) + os.sep
            real = os.readlink(f"/proc/self/fd/{fd}")
            if not real.startswith(base):
                raise NotRegular(f"{path} is {real} once opened, not under {beneath}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def copy_in(path: str, target: str, limit: int, beneath: str | None = None) -> int:
    """The regular file ``path`` copied by the kernel into the existing file ``target``, at
    most ``limit + 1`` bytes (a file that grows meanwhile fills no disk); returns the bytes
    copied. Raises NotRegular as ``open_regular`` does."""
    source = open_regular(path, beneath)
    try:
        out = os.open(target, os.O_WRONLY | os.O_TRUNC)
        try:
            copied = 0
            while copied <= limit:
                sent = os.sendfile(out, source, copied, min(1 << 30, limit + 1 - copied))
                if not sent:
                    break
                copied += sent
            return copied
        finally:
            os.close(out)
    finally:
        os.close(source)


def hash_fd(fd: int) -> tuple[str, int]:
    """(``sha256:<hex>``, size) of the open file's content, read from its start."""
    hasher = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    offset = 0
    while read := os.preadv(fd, [buffer], offset):
        hasher.update(view[:read])  # releases the GIL: files are hashed in parallel threads
        offset += read
    return "sha256:" + hasher.hexdigest(), offset


def hash_copy(fd: int) -> tuple[str, int, Stamp]:
    """Hash the store's own copy ``fd`` (open nowhere else) as the doc above says: read-only,
    mtime set in the past, hashed while it is written to disk when it is large (a small one is
    written with its rename: ``durable``). Returns (digest, size, its stamp before the rename
    into place). Raises OSError if the disk refuses the write, or ``Changed`` if the copy
    changed while it was hashed (then it must not be stored)."""
    os.fchmod(fd, 0o400)
    past = time.time_ns() - BACKDATE_NS
    os.utime(fd, ns=(past, past))
    before = Stamp.of(os.fstat(fd))
    failed: list[OSError] = []

    def written() -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            failed.append(exc)

    syncing = threading.Thread(target=written, name="blob-fsync", daemon=True)
    if before.size >= SYNC_WHILE_HASHING:
        syncing.start()
    try:
        digest, size = hash_fd(fd)
    finally:
        if syncing.is_alive():
            syncing.join()
    if failed:
        raise failed[0]
    after = Stamp.of(os.fstat(fd))
    if after != before or size != after.size:
        raise Changed
    return digest, size, after


def durable(fd: int, directory: str, *more: str) -> None:
    """The blob ``fd`` just renamed into ``directory`` on disk, with its name: the file synced
    (on ext4 this commits the rename with it), then the directory (and ``more`` directories,
    one just made)."""
    os.fsync(fd)
    for path in (directory, *more):
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class Changed(Exception):
    """A blob file changed while it was hashed or handed out."""


def place(fd: int, path: str) -> None:
    """The open file ``fd`` at the new path ``path``: a hard link to that very inode where the
    filesystem allows it, else a copy of its content (another filesystem). Raises
    FileExistsError if ``path`` exists (a file there may be another blob's link: writing into
    it would change that blob)."""
    try:
        fds = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        pass  # no /proc: copy it
    else:
        try:  # linkat(2) following /proc/self/fd/<fd>: the very inode that is open
            os.link(str(fd), path, src_dir_fd=fds, follow_symlinks=True)
            return
        except FileExistsError:
            raise
        except OSError:
            pass  # another filesystem, a file deleted meanwhile: copy it
        finally:
            os.close(fds)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        offset = 0
        while sent := os.sendfile(out, fd, offset, 1 << 30):
            offset += sent
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(out)
