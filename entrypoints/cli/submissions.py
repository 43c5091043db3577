"""The submission file and the preview summary.

``<workspace>/.tuneplane-data/submissions/<preview-id>.json`` holds
``{"server", "preview": <the preview JSON>, "retry_key": <a fresh uuid4>}`` (0600, atomic).
"""

from __future__ import annotations

import os
import re
import shlex
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from domain.documents import NestedTooDeeply, json_loads
from domain.errors import InvalidInput
from entrypoints.cli import output
from entrypoints.cli.config import write_private_json
from entrypoints.cli.jobs import retry_words
from entrypoints.cli.workspace import find_workspace, submissions_dir

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def parse_sets(sets: tuple[str, ...]) -> dict[str, str]:
    """``--set K=V`` pairs as strings (the server coerces them to the declared types)."""
    out: dict[str, str] = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(
                f"--set {item!r} is not KEY=VALUE", fix="write it as --set lr=0.001", field="--set"
            )
        out[key.strip()] = value
    return out


def write_submission(workspace: Path, server: str, preview: dict[str, Any]) -> Path:
    """Record the preview with a fresh retry key (mode 0600, written atomically)."""
    pid = str(preview.get("id", ""))
    if not _ID_RE.fullmatch(pid):
        raise InvalidInput(f"the server returned an unusable preview id {pid!r}", fix="report it")
    path = submissions_dir(workspace) / f"{pid}.json"
    write_private_json(path, {"server": server, "preview": preview, "retry_key": str(uuid.uuid4())})
    return path


LATEST = "latest"


def commit_file(path: Path) -> Path:
    """``--commit latest``: the workspace's newest submission file (by the time it was
    written); any other path as given (a file actually named ``latest`` wins)."""
    if str(path) != LATEST or path.exists():
        return path
    folder = submissions_dir(find_workspace())
    files = [f for f in folder.glob("*.json") if f.is_file()] if folder.is_dir() else []
    if not files:
        raise InvalidInput(
            f"no submission file in {folder}",
            fix="preview first: `tp submit NAME --profile P --preview`",
            field="--commit",
        )
    newest = max(files, key=lambda f: (f.stat().st_mtime_ns, f.name))
    output.info(f"submission file: {shown(newest)} (the newest of {len(files)})")
    return newest


def read_submission(path: Path) -> dict[str, Any]:
    try:
        data = json_loads(path.read_bytes())
        triple = (data["preview"]["id"], data["preview"]["digest"], data["retry_key"])
    except FileNotFoundError:
        raise InvalidInput(
            f"{path} does not exist", fix="pass the file `tp submit --preview` printed"
        ) from None
    except OSError as exc:  # a directory, no permission
        raise InvalidInput(
            f"cannot read {path}: {exc.strerror or exc}",
            fix="pass the file `tp submit --preview` printed",
            field="--commit",
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        why = f": {exc}" if isinstance(exc, NestedTooDeeply) else ""
        raise InvalidInput(
            f"{path} is not a submission file{why} (needs preview.id, preview.digest, retry_key)",
            fix="make a new one with `tp submit NAME --profile P --preview`",
            field="--commit",
        ) from None
    if not all(isinstance(v, str) and v for v in triple):
        raise InvalidInput(f"{path} has an empty id, digest or retry key", fix="preview again")
    return dict(data)


def shown(path: Path) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("../..") else str(path)


def _expiry(iso: str) -> str:
    try:
        left = datetime.fromisoformat(iso) - datetime.now(UTC)
    except (TypeError, ValueError):
        return iso
    minutes = int(left.total_seconds() // 60)
    return f"{iso} (in {minutes} min)" if minutes >= 0 else f"{iso} (expired)"


def _role_rows(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per role: ``main   cpu:1 → 1 × (1 CPUs, 2048 MB) in pool local``."""
    rows = []
    for role in spec.get("roles") or []:
        r = role.get("resources") or {}
        gpus = f", {r['gpus']} × {r.get('gpu_model')} GPU" if r.get("gpus") else ""
        rows.append((
            f"role {role.get('name')}",
            f"{role.get('profile')} → {role.get('members')} × ({r.get('cpus')} CPUs, "
            f"{r.get('memory_mb')} MB{gpus}) in pool {role.get('pool')}",
        ))  # fmt: skip
    return rows


def print_summary(preview: dict[str, Any], n_files: int) -> None:
    spec = preview.get("spec") or {}
    rt = spec.get("runtime") or {}
    src = spec.get("source")
    rows = [
        ("experiment", spec.get("experiment")),
        ("method", spec.get("method")),
        ("runtime", f"{rt.get('name')}  {rt.get('image')}@{rt.get('digest')}"),
        *_role_rows(spec),
        ("backend", spec.get("backend")),
        ("queue", spec.get("queue")),
        ("retry", retry_words(spec.get("retry"))),
        ("command", shlex.join(str(a) for a in spec.get("command") or [])),
        ("params", ", ".join(f"{k}={v!r}" for k, v in (spec.get("params") or {}).items())),
        ("env", ", ".join(sorted(spec.get("env") or {})) or "-"),
        ("plugins", ", ".join(f"{p['name']}@{p['version']} ({p['executes']})"
                              for p in spec.get("plugins") or ()) or "-"),
        ("source", f"{src['digest']} ({output.human_size(src['size'])}, {n_files} files)"
         if src else "-"),
        ("expires", _expiry(str(preview.get("expires_at")))),
        ("preview", preview.get("id")),
        ("digest", preview.get("digest")),
    ]  # fmt: skip
    for key, value in rows:
        output.out.print(f"{key:<10} {output.escape(value)}", markup=False)
