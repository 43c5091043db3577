"""Operating-system helpers of the embedded PostgreSQL: binaries, the server user, pid files."""

from __future__ import annotations

import grp
import importlib.util
import logging
import os
import re
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.child_env import child_environ
from adapters.system_users import ensure_account, exists

log = logging.getLogger(__name__)

DEFAULT_ROOT_USER = "tuneplane-pg"


class BinariesNotFound(RuntimeError):
    pass


def _candidate_bin_dirs(explicit: Path | None = None) -> list[Path]:
    found: list[Path] = []
    if explicit is not None:
        found.append(explicit)
    spec = importlib.util.find_spec("pgserver")  # located without importing it (side effects)
    if spec is not None and spec.submodule_search_locations:
        found.append(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin")
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    found.extend(debian)
    return [d for d in found if (d / "postgres").is_file() and (d / "initdb").is_file()]


def _major_version(bin_dir: Path) -> str:
    out = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"\s(\d+)(?:\.\d+)?", out)
    return match.group(1) if match else "?"


def find_bin_dir(wanted_major: str | None, explicit: Path | None = None) -> Path:
    """The first usable bin dir (``explicit``: TUNEPLANE_PG_BIN, pgserver, Debian), matching a
    cluster's major version when ``wanted_major`` is given."""
    candidates = _candidate_bin_dirs(explicit)
    if not candidates:
        raise BinariesNotFound(
            "no PostgreSQL server binaries found",
        )
    if wanted_major is None:
        return candidates[0]
    versions = {d: _major_version(d) for d in candidates}
    for d, v in versions.items():
        if v == wanted_major:
            return d
    have = ", ".join(f"{v} ({d})" for d, v in versions.items())
    raise BinariesNotFound(
        f"the cluster was made by PostgreSQL {wanted_major}; found only {have}. "
        "Install that version and set TUNEPLANE_PG_BIN to its bin directory, or dump and "
        "restore the data into a new data directory"
    )


def run_tool(
    bin_dir: Path, argv: list[str], timeout: float, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``bin_dir/argv[0]`` with output captured; never raises on a non-zero exit."""
    return subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def running_postmaster(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) of the server running on ``pgdata``, or None.

    A ``postmaster.pid`` whose process is gone, or whose pid now belongs to another program
    (pid reuse after a container restart), is stale and is removed so that a start succeeds.
    """
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except FileNotFoundError:
        return None
    try:
        pid, port = int(lines[0]), int(lines[3])
    except (IndexError, ValueError):
        return None  # being written right now by a starting server; postgres sorts it out
    if _is_postgres(pid):
        return pid, port
    log.warning("removing stale %s (pid %s is not a running postgres)", pid_file, pid)
    pid_file.unlink(missing_ok=True)
    return None


def _is_postgres(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return True  # no /proc: trust kill(0)
    return comm in ("postgres", "postmaster")


@dataclass(frozen=True)
class ServerUser:
    """The unprivileged account the server runs as when we are root."""

    name: str
    uid: int
    gid: int
    home: str

    def popen_kwargs(self) -> dict[str, Any]:
        env = {
            "PATH": child_environ().get("PATH", "/usr/bin:/bin"),
            "HOME": self.home,
            "USER": self.name,
            "LANG": "C.UTF-8",
        }
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "env": env}

    def own(self, path: Path, exclude: set[Path] | None = None) -> None:
        """Give ``path`` (and its direct children, except ``exclude``) to this user, and make
        sure it can reach ``path`` by adding search-only permission to parents that lack it."""
        paths = [path]
        if path.is_dir():
            paths += [p for p in path.iterdir() if p not in (exclude or set())]
        for p in paths:
            st = p.lstat()
            if (st.st_uid, st.st_gid) != (self.uid, self.gid) and not stat.S_ISLNK(st.st_mode):
                os.chown(p, self.uid, self.gid)
        self.make_reachable(path)

    def make_reachable(self, path: Path) -> None:
        """Add search-only permission (o+x) to the parents of ``path`` this user cannot pass."""
        groups = {g.gr_gid for g in grp.getgrall() if self.name in g.gr_mem} | {self.gid}
        for parent in path.absolute().parents:
            st = parent.stat()
            if st.st_uid == self.uid:
                ok = bool(st.st_mode & stat.S_IXUSR)
            elif st.st_gid in groups:
                ok = bool(st.st_mode & stat.S_IXGRP)
            else:
                ok = bool(st.st_mode & stat.S_IXOTH)
            if not ok:
                log.warning(
                    "granting search permission (o+x) on %s so that user %s reaches %s",
                    parent,
                    self.name,
                    path,
                )
                parent.chmod(stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


def server_user(explicit: str | None = None) -> ServerUser | None:
    """None when we are not root; otherwise the account to run the server as.

    ``explicit`` (TUNEPLANE_PG_USER) if set, else ``postgres`` if it exists, else ``tuneplane-pg``
    (created as a system account without a login shell).
    """
    if os.geteuid() != 0:
        return None
    name = explicit or ("postgres" if exists("postgres") else DEFAULT_ROOT_USER)
    account = ensure_account(
        name,
        "PostgreSQL refuses to run as root",
        "create an unprivileged user and set TUNEPLANE_PG_USER to it, or run as non-root",
    )
    return ServerUser(account.name, account.uid, account.gid, account.home)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as postgres does
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
