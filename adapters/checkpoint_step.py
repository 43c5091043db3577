"""The checkpoint step that runs where the control plane cannot read the checkpoints: in a
member's container, before its workload, over a job's checkpoint folder on a shared volume
(the Kubernetes backend's declared claim: docs/checkpoints.md#the-kubernetes-backend-built).

    python3 -I -c "$(cat checkpoint_step.py)" JOB_DIR ATTEMPT -- COMMAND [ARG…]

``JOB_DIR`` holds one directory per attempt, named by its number (``JOB_DIR/1``, ``JOB_DIR/2``,
…); the member's ``TUNEPLANE_CHECKPOINT_DIR`` is ``JOB_DIR/ATTEMPT``. The step:

1. makes ``JOB_DIR/ATTEMPT``;
2. finds the complete checkpoints of the earlier attempts by the contract of
   ``domain/checkpoints.py`` (a plain name, ``COMPLETE`` a regular file in it, regular files
   only: a symbolic link is left out and never followed);
3. orders them newest first as ``domain.checkpoints.newest_first`` does (attempt, then step,
   one without a step first, then the time its ``COMPLETE`` was written);
4. verifies them, newest first, against their manifest, ``.<name>.tuneplane-manifest.json``
   beside the checkpoint (``{"files": [{"path", "size", "sha256"}]}``: the shape of
   ``domain.artifacts.Manifest``); one that has none yet is hashed and, by member 0, given one
   (the first sighting is what later attempts verify against). One that does not verify (a file
   changed, missing or added; its manifest unreadable) is skipped, saying why on stderr (the
   member's log), for the one before it;
5. on member 0 only (``TUNEPLANE_MEMBER_INDEX``): gives the kept ones a manifest and deletes
   the rest of the earlier attempts' folders: everything but the ``KEEP`` newest complete
   checkpoints and the one resumed from (cut-short saves and links included);
6. runs ``COMMAND`` (exec: same process) with ``TUNEPLANE_CHECKPOINT_DIR`` and
   ``TUNEPLANE_RESUME_FROM`` (the checkpoint's path, empty when none verifies) set.

If ``JOB_DIR/ATTEMPT`` cannot be made, it exits ``EXIT`` before the workload started, saying
why. A checkpoint it cannot read is skipped, never fatal.

This file runs in the member's image, which holds none of TunePlane: standard library only,
Python 3.8 or later, and nothing imported from the project. The rules it shares with the
domain (the name, the marker's step, ``KEEP``, the order, the manifest's shape) are written
here again; ``tests/unit/test_checkpoint_step.py`` checks them against the domain's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
from typing import Any

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]{0,127}$")  # domain.checkpoints._NAME
MARKER_STEP = re.compile(r"^\s*(\d{1,18})\s*$")  # domain.checkpoints._STEP
ATTEMPT = re.compile(r"^[1-9][0-9]{0,8}$")
COMPLETE = "COMPLETE"
KEEP = 2
MAX_FILES = 10000
EXIT = 98  # the attempt's checkpoint directory cannot be made: nothing started
SAY = "tuneplane-checkpoints: "


def say(text: str) -> None:
    print(SAY + text, file=sys.stderr, flush=True)


def manifest_name(name: str) -> str:
    """Beside checkpoint ``name``; a checkpoint's name never starts with a dot."""
    return "." + name + ".tuneplane-manifest.json"


def is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def step_of(name: str, marker: str) -> int | None:
    """The marker's whole number, else the last number of the name (``checkpoint-1200``)."""
    try:
        with open(marker, "rb") as f:
            text = f.read(64).decode("utf-8", "replace")
    except OSError:
        text = ""
    found = MARKER_STEP.fullmatch(text)
    if found:
        return int(found.group(1))
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits and len(digits[-1]) <= 18 else None


class Checkpoint:
    def __init__(self, attempt: int, folder: str, name: str) -> None:
        self.attempt = attempt
        self.folder = folder  # JOB_DIR/<attempt>
        self.name = name
        self.path = os.path.join(folder, name)
        marker = os.path.join(self.path, COMPLETE)
        self.step = step_of(name, marker)
        self.completed = os.lstat(marker).st_mtime_ns
        self.manifest_path = os.path.join(folder, manifest_name(name))

    def order(self) -> tuple[int, bool, int, int]:
        return (self.attempt, self.step is None, self.step or 0, self.completed)

    def label(self) -> str:
        return f"checkpoint {self.name} of attempt {self.attempt}"


def attempts(job_dir: str, before: int) -> list[tuple[int, str]]:
    """The earlier attempts' folders: (number, path)."""
    out = []
    for entry in sorted(os.listdir(job_dir)):
        path = os.path.join(job_dir, entry)
        if ATTEMPT.fullmatch(entry) and int(entry) < before and is_dir(path):
            out.append((int(entry), path))
    return out


def complete(job_dir: str, before: int) -> list[Checkpoint]:
    """Every complete checkpoint of the attempts before ``before``, newest first."""
    found = []
    for number, folder in attempts(job_dir, before):
        try:
            entries = sorted(os.listdir(folder))
        except OSError as exc:
            say(f"attempt {number}'s folder cannot be read ({exc.strerror}): skipped")
            continue
        for name in entries:
            path = os.path.join(folder, name)
            if NAME.fullmatch(name) and is_dir(path) and is_file(os.path.join(path, COMPLETE)):
                try:
                    found.append(Checkpoint(number, folder, name))
                except OSError:
                    continue  # removed while we looked
    return sorted(found, key=Checkpoint.order, reverse=True)


def files_of(root: str) -> list[str]:
    """The regular files under ``root``, relative, "/"-separated; no link followed."""
    out = []
    for here, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(here, name)
            if is_file(path):
                out.append(os.path.relpath(path, root).replace(os.sep, "/"))
        if len(out) > MAX_FILES:
            raise ValueError(f"it holds more than {MAX_FILES} files")
    return out


def hashed(root: str, relative: str) -> dict[str, object]:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(os.path.join(root, relative), flags)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return {"path": relative, "size": size, "sha256": digest.hexdigest()}


def manifest_of(root: str) -> dict[str, Any]:
    """``domain.artifacts.Manifest.to_dict()`` of the checkpoint's files as they are now."""
    return {"files": [hashed(root, relative) for relative in files_of(root)]}


def recorded(c: Checkpoint) -> dict[str, Any] | None:
    """Its manifest, None when it has none; ValueError when the one there cannot be read."""
    if not os.path.lexists(c.manifest_path):
        return None
    if not is_file(c.manifest_path):
        raise ValueError("its manifest is not a regular file")
    try:
        with open(c.manifest_path, "rb") as f:
            data = json.loads(f.read(64 << 20))
        files = [
            {"path": str(x["path"]), "size": int(x["size"]), "sha256": str(x["sha256"])}
            for x in data["files"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"its manifest cannot be read ({exc})") from None
    return {"files": sorted(files, key=lambda x: str(x["path"]))}


def write_manifest(c: Checkpoint, manifest: dict[str, Any]) -> None:
    """Atomically: a temporary file, synced, renamed over the manifest's name."""
    temp = f"{c.manifest_path}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        json.dump(manifest, f, sort_keys=True, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, c.manifest_path)


def difference(then: dict[str, Any], now: dict[str, Any]) -> str:
    """The first difference by path, as ``domain.artifacts.compare`` names it, or ""."""
    a = {str(f["path"]): f for f in then["files"]}
    b = {str(f["path"]): f for f in now["files"]}
    for path in sorted(set(a) | set(b)):
        if path not in b:
            return f"{path} is missing"
        if path not in a:
            return f"{path} was added"
        if (a[path]["size"], a[path]["sha256"]) != (b[path]["size"], b[path]["sha256"]):
            return f"{path} changed"
    return ""


def verified(c: Checkpoint, first: bool) -> str:
    """Why ``c`` cannot be resumed from, or "" when it can (given a manifest if it had none)."""
    try:
        then = recorded(c)
        now = manifest_of(c.path)
    except (OSError, ValueError) as exc:
        return str(exc) if isinstance(exc, ValueError) else f"it cannot be read ({exc})"
    if then is None:
        if first:
            try:
                write_manifest(c, now)
            except OSError as exc:
                say(f"the manifest of {c.label()} cannot be written ({exc})")
        return ""
    why = difference(then, now)
    return "it does not match its manifest: " + why if why else ""


def collect(job_dir: str, before: int, kept: list[Checkpoint]) -> None:
    """Remove from the earlier attempts' folders everything but the kept checkpoints and their
    manifests; a folder left empty goes too. Failures are said, never fatal."""
    keep = {(c.folder, n) for c in kept for n in (c.name, manifest_name(c.name))}
    for _, folder in attempts(job_dir, before):
        for name in sorted(os.listdir(folder)):
            if (folder, name) in keep:
                continue
            path = os.path.join(folder, name)
            try:
                if is_dir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError as exc:
                say(f"{path} cannot be removed ({exc.strerror})")
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only when empty


def prepare(job_dir: str, attempt: int, first: bool) -> tuple[str, str]:
    """(TUNEPLANE_CHECKPOINT_DIR, TUNEPLANE_RESUME_FROM); OSError when the first is not made."""
    work = os.path.join(job_dir, str(attempt))
    os.makedirs(work, exist_ok=True)
    found = complete(job_dir, attempt)
    resume = None
    for c in found:
        why = verified(c, first)
        if not why:
            resume = c
            break
        say(f"{c.label()} is skipped: {why}")
    if first:
        kept = found[:KEEP]
        for c in kept:
            if c is not resume and not os.path.lexists(c.manifest_path):
                verified(c, first)  # older than the one resumed from: give it its manifest
        try:
            collect(job_dir, attempt, kept + ([resume] if resume and resume not in kept else []))
        except OSError as exc:  # a folder gone or unreadable: collected next time
            say(f"the earlier attempts' folders cannot all be collected ({exc})")
    if resume is None:
        say("no checkpoint verifies: starting from none" if found else "no checkpoint yet")
        return work, ""
    step = "" if resume.step is None else f", step {resume.step}"
    say(f"resuming from {resume.label()}{step}: {resume.path}")
    return work, resume.path


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not ATTEMPT.fullmatch(argv[1]):
        say("usage: JOB_DIR ATTEMPT -- COMMAND [ARG...]")
        return 2
    job_dir, attempt, command = argv[0], int(argv[1]), argv[3:]
    first = os.environ.get("TUNEPLANE_MEMBER_INDEX", "0") == "0"
    try:
        work, resume = prepare(job_dir, attempt, first)
    except OSError as exc:
        say(f"the checkpoint folder {job_dir}/{attempt} cannot be made ({exc}): is the"
            " checkpoint claim mounted and writable?")  # fmt: skip
        return EXIT
    env = dict(os.environ, TUNEPLANE_CHECKPOINT_DIR=work, TUNEPLANE_RESUME_FROM=resume)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        say(f"cannot start {command[0]}: {exc.strerror}")
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
