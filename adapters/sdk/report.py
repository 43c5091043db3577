"""Report training metrics from inside a job, for the node's collector: ``report.log``; mark
checkpoints complete so that a later attempt resumes from them: ``report.checkpoint``.

    from adapters.sdk import report        # or copy this one file next to your training code

    report.log({"train/loss": loss, "train/reward": reward}, step=step)
    start = report.resume_from()           # the last complete checkpoint, or None
    ...
    path = report.checkpoint_dir() / f"checkpoint-{step}"   # write your files there, then
    report.checkpoint(path, step)          # sync them and mark the checkpoint complete

Each call appends one JSONL line ``{"step", "wall_time", "metrics"}`` to
``$TUNEPLANE_METRICS_DIR/report-rank<RANK>.jsonl`` (``./tuneplane-metrics`` when the variable is
unset, e.g. outside TunePlane). Only rank 0 (``RANK``, default 0) writes, unless
``configure(all_ranks=True)``: most training code reports the same values on every rank.

A line is written with one ``write`` on a file opened with ``O_APPEND``, so the collector never
sees half a line from this process. Non-numeric values are left out; NaN and infinities are
written as JSON's non-standard ``NaN``/``Infinity``, which the collector reads.

This module never raises into training: a full disk, an unwritable directory or a value that
cannot be written is counted (``errors()``) and reported once on stderr, and the call returns.
It uses the standard library only, so that it can be copied into any image.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

_lock = threading.Lock()
_state: dict[str, object] = {"all_ranks": False, "directory": None, "fd": None, "path": None}
_errors = 0
_warned = False


def configure(
    *, all_ranks: bool | None = None, directory: str | os.PathLike[str] | None = None
) -> None:
    """Write from every rank (``all_ranks``), or to another ``directory``."""
    with _lock:
        if all_ranks is not None:
            _state["all_ranks"] = all_ranks
        if directory is not None:
            _state["directory"] = Path(directory)
        _close_locked()


def errors() -> int:
    """How many calls failed to write (and returned quietly)."""
    return _errors


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _directory() -> Path:
    chosen = _state["directory"]
    if isinstance(chosen, Path):
        return chosen
    return Path(os.environ.get("TUNEPLANE_METRICS_DIR") or "tuneplane-metrics")


def _fd_locked() -> int:
    fd = _state["fd"]
    if isinstance(fd, int):
        return fd
    directory = _directory()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"report-rank{_rank()}.jsonl"
    new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _state["fd"], _state["path"] = new, path
    return new


def _close_locked() -> None:
    fd = _state["fd"]
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
    _state["fd"] = None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # ints, floats, numpy and torch scalars
    except (TypeError, ValueError, OverflowError):
        return None
    return number if isinstance(number, float) else None


def log(metrics: Mapping[str, object], step: int, *, wall_time: float | None = None) -> None:
    """Record ``metrics`` (name → number) at ``step``. Never raises."""
    global _errors, _warned
    try:
        if not _state["all_ranks"] and _rank() != 0:
            return
        values = {}
        for name, value in metrics.items():
            number = _number(value)
            if number is not None and isinstance(name, str) and name:
                values[name] = number
        line = {
            "step": int(step),
            "wall_time": time.time() if wall_time is None else float(wall_time),
            "metrics": values,
        }
        data = (json.dumps(line, allow_nan=True) + "\n").encode()
        with _lock:
            fd = _fd_locked()
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"wrote {written} of {len(data)} bytes")
    except Exception as exc:  # never into training
        _errors += 1
        if not _warned:
            _warned = True
            print(f"tuneplane report: metrics not written ({exc!r}); training goes on",
                  file=sys.stderr)  # fmt: skip


def checkpoint_dir() -> Path:
    """Where to write checkpoints: ``$TUNEPLANE_CHECKPOINT_DIR`` (``./tuneplane-checkpoints``
    outside TunePlane). Each checkpoint is one directory directly under it."""
    return Path(os.environ.get("TUNEPLANE_CHECKPOINT_DIR") or "tuneplane-checkpoints")


def resume_from() -> Path | None:
    """The checkpoint this attempt resumes from (``$TUNEPLANE_RESUME_FROM``), or None on a first
    attempt, outside TunePlane, or when no earlier checkpoint verified."""
    found = os.environ.get("TUNEPLANE_RESUME_FROM", "")
    return Path(found) if found else None


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _hashed(path: Path) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _write_manifest(root: Path, marker: str) -> None:
    """``.<name>.tuneplane-manifest.json`` beside the checkpoint: path, size and sha256 of every
    regular file under it (no link followed), ``COMPLETE`` as it is about to be written; the
    Kubernetes backend's checkpoint step verifies the next attempt's resume against it
    (docs/checkpoints.md#the-kubernetes-backend-built)."""
    files = []
    for here, _, names in os.walk(root, followlinks=False):
        for name in names:
            file = Path(here) / name
            relative = file.relative_to(root).as_posix()
            if relative in ("COMPLETE", ".COMPLETE.tmp"):
                continue
            if stat.S_ISREG(os.lstat(file).st_mode):
                size, sha256 = _hashed(file)
                files.append({"path": relative, "size": size, "sha256": sha256})
    data = marker.encode()
    files.append(
        {"path": "COMPLETE", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    )
    manifest = {"files": sorted(files, key=lambda f: str(f["path"]))}
    target = root.parent / f".{root.name}.tuneplane-manifest.json"
    temp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(manifest, sort_keys=True, separators=(",", ":")))
    _sync(temp)
    os.replace(temp, target)


def checkpoint(path: str | os.PathLike[str], step: int | None = None) -> bool:
    """Mark the checkpoint directory ``path`` complete: every file and directory under it is
    synced to disk, then ``COMPLETE`` (holding ``step``) is written last, atomically. Call it
    once per checkpoint, after every rank saved its part (e.g. on rank 0 after a barrier).
    Returns whether it was marked; never raises into training (a failure is counted in
    ``errors()`` and said once on stderr): an unmarked checkpoint is simply not resumed from.

    With ``TUNEPLANE_CHECKPOINT_MANIFESTS=1`` (the Kubernetes backend with a checkpoint claim
    sets it) the checkpoint's manifest is written beside it first, so that a file changed
    after this call is caught when the next attempt verifies it."""
    global _errors, _warned
    try:
        root = Path(path)
        if not root.is_dir():
            raise NotADirectoryError(f"{root} is not a directory")
        for here, dirs, files in os.walk(root):
            for name in files:
                if name != "COMPLETE":
                    _sync(Path(here) / name)
            for name in dirs:
                _sync(Path(here) / name)
        text = "" if step is None else f"{int(step)}\n"
        if os.environ.get("TUNEPLANE_CHECKPOINT_MANIFESTS") == "1":
            try:  # best effort: without it, the next attempt's step makes one at first sight
                _write_manifest(root, text)
            except Exception as exc:
                _errors += 1
                if not _warned:
                    _warned = True
                    print(f"tuneplane report: checkpoint {path}: no manifest written ({exc!r});"
                          " marked complete still", file=sys.stderr)  # fmt: skip
        temp = root / ".COMPLETE.tmp"
        temp.write_text(text)
        _sync(temp)
        os.replace(temp, root / "COMPLETE")
        _sync(root)
        return True
    except Exception as exc:  # never into training
        _errors += 1
        if not _warned:
            _warned = True
            print(f"tuneplane report: checkpoint {path} not marked complete ({exc!r}); "
                  "training goes on", file=sys.stderr)  # fmt: skip
        return False


def flush() -> None:
    """Nothing is buffered: every ``log`` is one write. Kept for symmetry with other loggers."""


def close() -> None:
    with _lock:
        _close_locked()
