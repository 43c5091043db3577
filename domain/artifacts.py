"""Artifacts: what a member left in its output directory, recorded with a manifest when it
completes, and checked against it later (``tp artifacts verify``).

A manifest lists every file (path relative to the member's output directory, size, sha256),
sorted by path; its digest is the sha256 of its canonical JSON. Verifying scans the directory
again and reports, file by file, what changed, what is missing and what was added.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from domain.canonical import digest as content_digest
from domain.errors import InvalidInput

OUTPUT_DIR = "/tuneplane/outputs"  # where a member writes its outputs, in its container
OUTPUT_ENV = "TUNEPLANE_OUTPUT_DIR"
# a node reports at most this many files of one member (one gRPC message; docs/capsule.md)
MAX_REPORTED_FILES = 10_000


@dataclass(frozen=True, slots=True)
class ArtifactFile:
    path: str  # relative to the member's output directory, "/"-separated
    size: int
    sha256: str  # hex

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class Manifest:
    files: tuple[ArtifactFile, ...]
    # files found but not listed, as (why, how many), sorted: a name that is not UTF-8, holds
    # a control character or is too long cannot be recorded or downloaded (docs/capsule.md).
    # Absent from ``to_dict`` when empty, so a manifest without any keeps its digest.
    left_out: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(files: list[ArtifactFile], left_out: dict[str, int] | None = None) -> Manifest:
        return Manifest(
            tuple(sorted(files, key=lambda f: f.path)), tuple(sorted((left_out or {}).items()))
        )

    @property
    def left_out_count(self) -> int:
        return sum(n for _, n in self.left_out)

    @property
    def digest(self) -> str:
        return content_digest(self.to_dict())

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"files": [f.to_dict() for f in self.files]}
        if self.left_out:
            out["left_out"] = [{"why": why, "files": n} for why, n in self.left_out]
        return out

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Manifest:
        left = {str(x["why"]): int(x["files"]) for x in d.get("left_out", ())}
        return Manifest.of(
            [ArtifactFile(f["path"], int(f["size"]), f["sha256"]) for f in d["files"]], left
        )


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """The manifest recorded for one member when it completed."""

    member_id: str
    job_id: str
    attempt_id: str
    attempt: int  # the attempt's number
    member_index: int
    manifest: Manifest
    recorded_at: datetime
    node: str | None = None  # where the files live: a node's disk, or None: the control plane's


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """Hash a member's output directory on its node again (``tp artifacts verify``): the
    control plane asks through the ledger, the node's gateway carries it, the node answers."""

    id: str
    node: str
    job_id: str
    attempt_id: str
    member_id: str
    member_index: int
    requested_at: datetime
    # not None: send this file instead (a download of a file the node keeps); its answer is
    # the file stored in the blob store under its digest (error ""), or why not
    fetch: ArtifactFile | None = None


@dataclass(frozen=True, slots=True)
class ScanResult:
    """A node's answer: what the directory holds now (None: it is gone), or why it could not
    say (``error``). To a fetch: the file is in the blob store (error ""), or why not."""

    request_id: str
    manifest: Manifest | None
    error: str
    done_at: datetime


Problem = Literal["changed", "missing", "added"]


@dataclass(frozen=True, slots=True)
class Difference:
    path: str
    problem: Problem
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "problem": self.problem, "detail": self.detail}


def compare(recorded: Manifest, found: Manifest) -> list[Difference]:
    """Every difference between what was recorded and what is there now, by path."""
    now = {f.path: f for f in found.files}
    then = {f.path: f for f in recorded.files}
    out: list[Difference] = []
    for path in sorted(now.keys() | then.keys()):
        a, b = then.get(path), now.get(path)
        if b is None:
            out.append(Difference(path, "missing", "recorded but no longer there"))
        elif a is None:
            out.append(Difference(path, "added", f"not recorded ({b.size} bytes)"))
        elif (a.size, a.sha256) != (b.size, b.sha256):
            detail = f"sha256 {a.sha256[:12]}… → {b.sha256[:12]}…"
            if a.size != b.size:
                detail += f", {a.size} → {b.size} bytes"
            out.append(Difference(path, "changed", detail))
    return out


MAX_ARTIFACT_PATH = 4096  # characters of a manifest path a download may name


def check_artifact_path(path: str) -> str:
    """``path`` as a manifest names a file: relative, "/"-separated, no empty, "." or ".."
    part, no control character, at most MAX_ARTIFACT_PATH characters. A download names a file
    by it; the file is then looked up in the manifest, never opened from the user's text."""

    def bad(problem: str) -> InvalidInput:
        return InvalidInput(
            f"path {path[:80]!r} {problem}",
            fix="give a file's path as `tp artifacts ls JOB` lists it (relative to the member's"
            " output directory, e.g. model/weights.bin)",
            field="query.path",
        )

    if not path:
        raise bad("is empty")
    if len(path) > MAX_ARTIFACT_PATH:
        raise bad(f"is {len(path)} characters long, over {MAX_ARTIFACT_PATH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise bad("holds a control character")
    if path.startswith("/") or "\\" in path:
        raise bad("is absolute or holds a backslash")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise bad('has an empty, "." or ".." part')
    return path
