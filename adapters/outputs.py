"""Members' output directories on the control plane's host (domain.artifact_ports.OutputStorage).

Layout: ``<root>/<job id>/<attempt id>/<member index>/``, mounted into the member's container
at ``/tuneplane/outputs`` by backends that offer shared outputs. A scan hashes every regular
file below a member's directory (symbolic links are listed by their target path's text, never
followed: the workload wrote them).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from domain.artifacts import ArtifactFile, Manifest
from domain.errors import InvalidInput

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


def scan_directory(root: Path) -> Manifest | None:
    """The manifest of every file below ``root``; None when ``root`` is not a directory."""
    if not root.is_dir():
        return None
    files = []
    for directory, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(directory) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                target = os.readlink(path).encode(errors="surrogateescape")
                files.append(ArtifactFile(rel, len(target), hashlib.sha256(target).hexdigest()))
            elif path.is_file():
                files.append(ArtifactFile(rel, path.stat().st_size, _sha256(path)))
    return Manifest.of(files)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
