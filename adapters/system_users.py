"""System accounts TunePlane runs other programs as when it runs as root: the embedded
PostgreSQL's server (which refuses root) and the node's host-process members (kept away from the
node's credential). Made on first use as system accounts without a login shell or home."""

from __future__ import annotations

import logging
import pwd
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure_account(name: str, purpose: str, fix: str) -> Account:
    """The account ``name``, made first (``useradd --system``) if it does not exist.
    RuntimeError naming ``purpose`` and ``fix`` when it cannot be made."""
    if not exists(name):
        useradd = shutil.which("useradd")
        if useradd is None:
            raise RuntimeError(f"{purpose}, and user {name!r} does not exist; {fix}")
        log.warning("creating system user %s: %s", name, purpose)
        subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "--home-dir",
                "/nonexistent",
                name,
            ],
            check=True,
            capture_output=True,
        )
    entry = pwd.getpwnam(name)
    return Account(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
