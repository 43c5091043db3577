"""Checkpoint directories on the control plane's host (domain.artifact_ports.CheckpointStorage),
for backends whose members mount this host's directories (the local backend).

Layout: ``<root>/<job id>/<attempt number>/work/`` is mounted read-write at
``/tuneplane/checkpoints`` (TUNEPLANE_CHECKPOINT_DIR) into every member of the attempt;
``<root>/<job id>/<attempt number>/resume/<name>/`` holds the checkpoint the attempt resumes
from, materialized from the blob store, mounted read-only at ``/tuneplane/resume``. A checkpoint
is complete when its directory holds ``COMPLETE`` (docs/checkpoints.md); only regular files are
taken (a symbolic link the workload made is left out: it may point anywhere on this host), and
nothing below a linked directory is followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.blob_files import NotRegular, hash_fd, open_regular
from adapters.blobs import file_chunks
from domain.checkpoints import COMPLETE, MAX_FILES, Found, check_name, marker_step, step_from_name
from domain.errors import InvalidInput

_SEALED = ".sealed"  # beside a materialized checkpoint: the manifest digest it was placed from


class FilesystemCheckpoints:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, job_id: str, attempt: int) -> Path:
        return attempt_dir(self.root, job_id, attempt)

    async def prepare(self, job_id: str, attempt: int) -> tuple[str, str]:
        base = self._dir(job_id, attempt)

        def make() -> None:
            (base / "work").mkdir(parents=True, exist_ok=True, mode=0o755)
            (base / "resume").mkdir(parents=True, exist_ok=True, mode=0o755)

        await asyncio.to_thread(make)
        return str(base / "work"), str(base / "resume")

    async def complete(self, job_id: str, attempt: int) -> list[Found]:
        return await asyncio.to_thread(complete_in, self._dir(job_id, attempt) / "work")

    async def jobs(self) -> list[str]:
        def listed() -> list[str]:
            if not self.root.is_dir():
                return []
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.is_symlink())

        return await asyncio.to_thread(listed)

    async def attempts(self, job_id: str) -> list[int]:
        base = self.root / job_id
        if "/" in job_id or not job_id:
            return []

        def listed() -> list[int]:
            if not base.is_dir():
                return []
            return sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())

        return await asyncio.to_thread(listed)

    async def discard(self, job_id: str, attempt: int) -> None:
        base = self._dir(job_id, attempt)

        def remove() -> None:
            shutil.rmtree(base, ignore_errors=True)
            with contextlib.suppress(OSError):  # the job's directory, once it holds nothing
                base.parent.rmdir()

        await asyncio.to_thread(remove)

    def _resume(self, job_id: str, attempt: int, name: str) -> Path:
        return self._dir(job_id, attempt) / "resume" / check_name(name)

    async def resumed(self, job_id: str, attempt: int, name: str) -> str | None:
        marker = self._resume(job_id, attempt, name).with_name(f".{name}{_SEALED}")

        def read() -> str | None:
            return marker.read_text() if marker.is_file() else None

        return await asyncio.to_thread(read)

    async def clear(self, job_id: str, attempt: int, name: str) -> None:
        target = self._resume(job_id, attempt, name)
        marker = target.with_name(f".{name}{_SEALED}")
        await asyncio.to_thread(marker.unlink, True)
        await asyncio.to_thread(shutil.rmtree, target, True)

    async def resume_path(self, job_id: str, attempt: int, name: str, path: str) -> str:
        root = self._resume(job_id, attempt, name)
        target = (root / path).resolve()
        if not target.is_relative_to(root.resolve()) or path.startswith("/"):
            raise InvalidInput(f"checkpoint file {path!r} is outside its checkpoint",
                               fix="record checkpoints through their manifests only")  # fmt: skip
        await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
        return str(target)

    async def hashed(self, path: str, beneath: str) -> tuple[str, int]:
        def read() -> tuple[str, int]:
            try:
                fd = open_regular(path, beneath)
            except NotRegular as exc:
                raise InvalidInput(str(exc), fix="checkpoints hold regular files only") from None
            try:
                digest, size = hash_fd(fd)
            finally:
                os.close(fd)
            return digest.removeprefix("sha256:"), size

        return await asyncio.to_thread(read)

    def read(self, path: str, beneath: str) -> AsyncIterator[bytes]:
        return file_chunks(path, beneath)

    async def seal(self, job_id: str, attempt: int, name: str, digest: str) -> None:
        target = self._resume(job_id, attempt, name)
        await asyncio.to_thread(target.mkdir, parents=True, exist_ok=True)  # an empty one too
        marker = target.with_name(f".{name}{_SEALED}")
        await asyncio.to_thread(marker.write_text, digest)


def attempt_dir(root: Path, job_id: str, attempt: int) -> Path:
    """``<root>/<job id>/<attempt>``; InvalidInput for an id that is not one path segment."""
    if not job_id or "/" in job_id or job_id in (".", "..") or attempt < 1:
        raise InvalidInput(f"{job_id!r}/{attempt} cannot name a checkpoint directory",
                           fix="check the job id and attempt number")  # fmt: skip
    return root / job_id / str(attempt)


def complete_in(work: Path) -> list[Found]:
    """The complete checkpoints directly under ``work`` (docs/checkpoints.md): a plain name,
    ``COMPLETE`` a regular file, regular files only (a symbolic link is left out, nothing below
    a linked directory is followed), at most ``MAX_FILES``. One that cannot be read whole (a
    directory the workload made unreadable) is left out, never taken in part."""
    if not work.is_dir() or work.is_symlink():
        return []
    found = []
    for entry in sorted(work.iterdir()):
        with contextlib.suppress(OSError):
            checkpoint = _complete_one(entry)
            if checkpoint is not None:
                found.append(checkpoint)
    return found


def _complete_one(entry: Path) -> Found | None:
    marker = entry / COMPLETE
    if entry.is_symlink() or not entry.is_dir() or marker.is_symlink() or not marker.is_file():
        return None
    try:
        check_name(entry.name)
    except InvalidInput:
        return None  # not a checkpoint by the contract: never resumed from

    def unreadable(exc: OSError) -> None:
        raise exc

    files: list[tuple[str, str]] = []
    for directory, dirs, names in os.walk(entry, onerror=unreadable, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                files.append((path.relative_to(entry).as_posix(), str(path)))
        if len(files) > MAX_FILES:
            return None
    with os.fdopen(open_regular(str(marker), str(entry)), "rb") as f:
        text = f.read(64).decode(errors="replace")
    step = marker_step(text)
    step = step if step is not None else step_from_name(entry.name)
    return Found(entry.name, step, tuple(files), str(entry))
