"""Members' output directories on the control plane's host (domain.artifact_ports.OutputStorage).

Layout: ``<root>/<job id>/<attempt id>/<member index>/``, mounted into the member's container
at ``/tuneplane/outputs`` by backends that offer shared outputs. A scan hashes every regular
file below a member's directory (symbolic links are listed by their target path's text, never
followed: the workload wrote them).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import AsyncGenerator
from pathlib import Path

from domain.artifacts import MAX_ARTIFACT_PATH, ArtifactFile, Manifest, check_artifact_path
from domain.errors import Conflict, InvalidInput, NotFound

_CHUNK = 1024 * 1024


class FilesystemOutputs:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, job_id: str, attempt_id: str, member_index: int) -> Path:
        for part in (job_id, attempt_id):
            if not part or "/" in part or part in (".", ".."):
                raise InvalidInput(f"{part!r} cannot name an output directory", fix="check the id")
        return self.root / job_id / attempt_id / str(member_index)

    async def prepare(self, job_id: str, attempt_id: str, member_index: int) -> str:
        path = self._dir(job_id, attempt_id, member_index)
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True, mode=0o755)
        return str(path)

    async def scan(self, job_id: str, attempt_id: str, member_index: int) -> Manifest | None:
        path = self._dir(job_id, attempt_id, member_index)
        return await asyncio.to_thread(self._scan, path)

    async def open(
        self, job_id: str, attempt_id: str, member_index: int, path: str
    ) -> tuple[int, AsyncGenerator[bytes, None]]:
        where = self._dir(job_id, attempt_id, member_index)
        parts = [*where.relative_to(self.root).parts, *check_artifact_path(path).split("/")]
        fd = await asyncio.to_thread(_open_beneath, self.root, parts)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Conflict(
                    f"{path} is not a regular file now",
                    fix="`tp artifacts verify` shows what changed",
                )
        except BaseException:
            os.close(fd)
            raise
        return info.st_size, _chunks(fd)

    def _scan(self, path: Path) -> Manifest | None:
        """None when a directory on the way from the root is a symbolic link: a member that
        can write beside its directory (on Slurm, the shared filesystem) may have replaced it
        with a link elsewhere, and the control plane hashes only what is below its root."""
        at = self.root
        for part in path.relative_to(self.root).parts:
            at = at / part
            if at.is_symlink():
                return None
        return scan_directory(path)


NOT_UTF8 = "its name is not valid UTF-8"
CONTROL = "its name holds a control character (a line break, a tab, …)"
TOO_LONG = f"its path is longer than {MAX_ARTIFACT_PATH} characters"
BACKSLASH = "its name holds a backslash"


def unlisted(rel: str) -> str | None:
    """Why a file at ``rel`` (below a member's output directory, as ``os.walk`` names it:
    bytes that are not UTF-8 are lone surrogates) cannot be listed in a manifest, or None. A
    manifest's path is stored, sent and later named by a download (``check_artifact_path``)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return NOT_UTF8
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return CONTROL
    if len(rel) > MAX_ARTIFACT_PATH:
        return TOO_LONG
    if "\\" in rel:
        return BACKSLASH
    return None


def scan_directory(root: Path) -> Manifest | None:
    """The manifest of every file below ``root``; None when ``root`` is not a directory. A
    file whose path cannot be listed (:func:`unlisted`) is left out, counted by why in the
    manifest's ``left_out``: the member's exit is reported all the same."""
    if not root.is_dir():
        return None
    files = []
    left_out: dict[str, int] = {}
    for directory, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(directory) / name
            rel = path.relative_to(root).as_posix()
            link = path.is_symlink()
            if not link and not path.is_file():
                continue
            why = unlisted(rel)
            if why is not None:
                left_out[why] = left_out.get(why, 0) + 1
            elif link:
                target = os.readlink(path).encode(errors="surrogateescape")
                files.append(ArtifactFile(rel, len(target), hashlib.sha256(target).hexdigest()))
            else:
                files.append(ArtifactFile(rel, path.stat().st_size, _sha256(path)))
    return Manifest.of(files, left_out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_beneath(root: Path, parts: list[str]) -> int:
    """A read-only descriptor of ``root/parts…``, each part opened relative to the one before
    with O_NOFOLLOW: a symbolic link anywhere on the way (a member may have replaced a
    directory with one) is refused, so nothing outside ``root`` is ever read."""
    at = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO never blocks the open
            if not last:
                flags |= os.O_DIRECTORY
            try:
                nxt = os.open(part, flags, dir_fd=at)
            except FileNotFoundError:
                raise NotFound(
                    f"{'/'.join(parts[3:])} is no longer in the member's output directory",
                    fix="`tp artifacts verify JOB` shows what is missing",
                ) from None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise Conflict(
                    f"{'/'.join(parts[3:])}: {'/'.join(parts[: i + 1][3:]) or part} is a symbolic"
                    " link or not a directory now (a link's manifest entry is its text, and links"
                    " are never followed)",
                    fix="`tp artifacts verify JOB` shows what changed",
                ) from None
            os.close(at)
            at = nxt
        return at
    except BaseException:
        os.close(at)
        raise


async def _chunks(fd: int) -> AsyncGenerator[bytes, None]:
    try:
        while chunk := await asyncio.to_thread(os.read, fd, _CHUNK):
            yield chunk
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
