"""Checkpoints kept in place on a filesystem the members and this control plane share
(domain.artifact_ports.CheckpointsInPlace; Slurm's shared directory, docs/checkpoints.md).

Layout: ``<root>/<job id>/<attempt number>/`` is the members' TUNEPLANE_CHECKPOINT_DIR; each
checkpoint is a directory in it, found complete by the same rules as on the local backend
(``adapters.checkpoint_dirs.complete_in``). Nothing is copied: a recorded checkpoint stays in its
attempt's directory, where the next attempt reads it (TUNEPLANE_RESUME_FROM), read-only.

The members may write anywhere below ``<root>/<job id>/`` (on Slurm they run as the control
plane's own user), so nothing here trusts what it finds: a directory on the way that is a
symbolic link is never entered, every file is opened without following a link, and a
checkpoint is verified against its manifest (every file's size and sha256, nothing added, no
link) before an attempt resumes from it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from adapters.checkpoint_dirs import attempt_dir, complete_in
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import MAX_FILES, Checkpoint, Found, check_name
from domain.errors import InvalidInput, Unavailable

_CHUNK = 1024 * 1024
_WRITE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
T = TypeVar("T")


class SharedDirCheckpoints:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, job_id: str, attempt: int) -> Path:
        return attempt_dir(self.root, job_id, attempt)

    def _linked(self, path: Path) -> bool:
        """A directory from the root down to ``path`` is a symbolic link (a member replaced
        it): never entered."""
        at = self.root
        for part in path.relative_to(self.root).parts:
            at = at / part
            if at.is_symlink():
                return True
        return False

    async def _io(self, what: str, call: Callable[[], T]) -> T:
        """``call`` on a thread; the shared directory unreadable is Unavailable, saying so."""
        try:
            return await asyncio.to_thread(call)
        except OSError as exc:
            raise Unavailable(
                f"the shared checkpoint directory {self.root} cannot be {what}: {exc}",
                fix="check that the shared directory is mounted here and that the control "
                "plane's user can read and write it (docs/slurm.md)",
            ) from exc

    async def prepare(self, job_id: str, attempt: int) -> str:
        base = self._dir(job_id, attempt)

        def make() -> str:
            base.mkdir(parents=True, exist_ok=True, mode=0o755)
            if self._linked(base) or not base.is_dir():
                raise InvalidInput(
                    f"the checkpoint directory {base} is a symbolic link",
                    fix=f"remove {base}: the control plane makes it",
                )
            return str(base)

        return await self._io("written", make)

    async def complete(self, job_id: str, attempt: int) -> list[Found]:
        base = self._dir(job_id, attempt)
        return await self._io("read", lambda: [] if self._linked(base) else complete_in(base))

    async def manifest(self, found: Found) -> Manifest | str:
        def hashed() -> Manifest | str:
            files = []
            for rel, path in found.files:
                try:
                    size, digest = _hash(Path(path))
                except OSError as exc:
                    return f"{rel} cannot be read: {exc.strerror or exc}"
                files.append(ArtifactFile(rel, size, digest))
            return Manifest.of(files)

        return await asyncio.to_thread(hashed)

    def path(self, job_id: str, attempt: int, name: str) -> str:
        return str(self._dir(job_id, attempt) / check_name(name))

    async def verify(self, checkpoint: Checkpoint) -> str | None:
        where = Path(self.path(checkpoint.job_id, checkpoint.attempt, checkpoint.name))

        def check() -> str | None:
            if self._linked(where) or not where.is_dir():
                return f"its directory {where} is gone"
            return _verify(where, {f.path: f for f in checkpoint.manifest.files})

        return await asyncio.to_thread(check)

    async def seal(self, job_id: str, attempt: int, name: str) -> None:
        where = Path(self.path(job_id, attempt, name))

        def read_only() -> None:
            if self._linked(where) or not where.is_dir():
                return
            for directory, dirs, names in os.walk(where, topdown=False, followlinks=False):
                for entry in [*names, *dirs]:
                    _drop_write(Path(directory) / entry)
            _drop_write(where)

        await self._io("sealed", read_only)

    async def prune(self, job_id: str, attempt: int, keep: set[str]) -> None:
        base = self._dir(job_id, attempt)

        def remove() -> None:
            if self._linked(base.parent):
                return
            if base.is_symlink() or not base.is_dir():
                base.unlink(missing_ok=True)
            else:
                for entry in base.iterdir():
                    if entry.name not in keep or entry.is_symlink() or not entry.is_dir():
                        _remove(entry)
                if not keep:
                    _remove(base)
            if base.parent.is_dir() and not any(base.parent.iterdir()):
                base.parent.rmdir()  # the job's directory, once it holds nothing

        await self._io("cleaned", remove)

    async def jobs(self) -> list[str]:
        def listed() -> list[str]:
            if not self.root.is_dir():
                return []
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.is_symlink())

        return await self._io("read", listed)

    async def attempts(self, job_id: str) -> list[int]:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            return []
        base = self.root / job_id

        def listed() -> list[int]:
            if base.is_symlink() or not base.is_dir():
                return []
            return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())

        return await self._io("read", listed)


def _hash(path: Path) -> tuple[int, str]:
    """(size, sha256) of a regular file, opened without following a link."""
    if not stat.S_ISREG(path.lstat().st_mode):  # never opens a device, a FIFO, a link
        raise OSError(f"{path} is not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        digest, size = hashlib.sha256(), 0
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _verify(where: Path, want: dict[str, ArtifactFile]) -> str | None:
    """None when ``where`` holds exactly the files of the manifest, else the first problem."""
    seen = 0
    try:
        for directory, dirs, names in os.walk(where, onerror=_raise, followlinks=False):
            dirs.sort()
            for name in [*dirs, *sorted(names)]:
                path = Path(directory) / name
                rel = path.relative_to(where).as_posix()
                if path.is_symlink():
                    return f"{rel} is a symbolic link"
                if name in dirs:
                    continue
                seen += 1
                if seen > MAX_FILES:
                    return f"it holds more than {MAX_FILES} files"
                recorded = want.get(rel)
                if recorded is None:
                    return f"{rel} was added after it was recorded"
                size, digest = _hash(path)
                if size != recorded.size:
                    return f"{rel} has {size} bytes, not the {recorded.size} recorded"
                if digest != recorded.sha256:
                    return f"{rel} changed after it was recorded (sha256 {digest[:12]}…)"
    except OSError as exc:
        return f"it cannot be read: {exc}"
    if seen < len(want):
        return f"{len(want) - seen} of its files are missing"
    return None


def _raise(exc: OSError) -> None:
    raise exc


def _drop_write(path: Path) -> None:
    _chmod(path, lambda mode: mode & ~_WRITE)


def _chmod(path: Path, new: Callable[[int], int]) -> None:
    """Change the mode of a regular file or directory through a descriptor opened without
    following a link (a link swapped in between is never followed); anything else, or a path
    that cannot be opened, is left as it is."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode) and not stat.S_ISDIR(path.lstat().st_mode):
            return
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            os.fchmod(fd, new(stat.S_IMODE(mode)))
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    """Remove a file, link or tree, the tree's directories made writable first (a sealed
    checkpoint, or one the workload made read-only); what cannot be removed stays (the next
    harvest or sweep tries again)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    _chmod(path, lambda mode: mode | stat.S_IRWXU)
    for directory, dirs, _ in os.walk(path, followlinks=False):
        for name in dirs:
            _chmod(Path(directory) / name, lambda mode: mode | stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)
