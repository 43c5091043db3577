"""How a host-process member is kept apart on its host (``adapters/node/processes.py``): what
the host offers, checked once at the daemon's start, and the command line that builds the
member's view of the host (a private mount namespace, its binds, the state directory covered,
the member's account) and then runs its command."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.container_engine.spec import WORKDIR
from adapters.node import cgroups
from adapters.node.cgroups import CgroupHost
from adapters.node.member_view import Bind
from adapters.system_users import Account, ensure_account
from domain.capsule import CAPSULE_DIR
from domain.errors import InvalidInput
from domain.node_messages import PrepareOrder

MEMBER_USER = "tuneplane-member"
STAGED_TMP = "/tuneplane/.tmp"  # where a member's own /tmp waits while its view is built


@dataclass(frozen=True, slots=True)
class Isolation:
    """How this host runs members: ``unshare`` (mount namespace), ``setpriv`` and the account
    (as root), the cgroup hierarchy."""

    unshare: str
    setpriv: str | None
    account: Account | None
    cgroups: CgroupHost

    def describe(self) -> str:
        who = f"as {self.account.name}" if self.account else "as the daemon's user"
        return f"host processes {who}; limits: {self.cgroups.describe()}"


def isolation(node: str, member_user: str | None, cgroup_host: CgroupHost | None) -> Isolation:
    """What this host offers, checked once at the daemon's start (a clear refusal now rather
    than failing every member later)."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare is None:
        raise InvalidInput(
            "the host-process executor needs `unshare` (util-linux) and this host has none",
            fix="install util-linux, or run members as containers (--executor container)",
            field="executor",
        )
    root = os.geteuid() == 0
    probe = [unshare, "-m", "--propagation", "private"] + ([] if root else ["-r"])
    done = subprocess.run([*probe, "true"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise InvalidInput(
            "this host cannot give members a mount namespace of their own "
            f"(`{' '.join(probe)} true` says: {done.stderr.strip() or done.returncode})",
            fix="run the daemon as root (or allow unprivileged user namespaces: "
            "sysctl kernel.unprivileged_userns_clone=1), or use --executor container",
            field="executor",
        )
    account = None
    if root:
        if setpriv is None:
            raise InvalidInput(
                "the host-process executor needs `setpriv` (util-linux) to run members as "
                "another user than root",
                fix="install util-linux",
                field="executor",
            )
        try:
            account = ensure_account(
                member_user or MEMBER_USER,
                "host-process members run as an unprivileged account",
                "create it, or name another with --member-user",
            )
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            raise InvalidInput(
                str(exc), fix="pass --member-user NAME", field="member_user"
            ) from None
        if account.uid == 0:
            raise InvalidInput(
                f"--member-user {account.name} is root: members would read the node's credential",
                fix="name an unprivileged account",
                field="member_user",
            )
    return Isolation(unshare, setpriv, account, cgroup_host or cgroups.detect(node))


def member_argv(
    iso: Isolation,
    order: PrepareOrder,
    final: Path,
    binds: Sequence[Bind],
    hidden: Sequence[Path],
) -> list[str]:
    """The member's command line: ``unshare`` into a private mount namespace, bind its view
    (``final``: its ``fs/`` directory as it will be once renamed into place), cover ``hidden``
    (the state directory last), drop to the member's account, exec the command (the same pid
    throughout)."""
    mounts = [
        ("tmpfs", "/tuneplane", False),
        (str(final / "workspace"), WORKDIR, False),
        (str(final / "tmp"), STAGED_TMP, False),  # moved onto /tmp once the rest is hidden
    ]
    if order.capsule:
        mounts.append((str(final / CAPSULE_DIR.lstrip("/")), CAPSULE_DIR, True))
    mounts += [(b.source, b.target, b.read_only) for b in binds]
    lines = ["set -e"]
    for source, target, read_only in mounts:
        if source == "tmpfs":
            lines.append(f"mkdir -p {_q(target)} 2>/dev/null || true")
            lines.append(f"mount -t tmpfs -o mode=0755 tuneplane {_q(target)}")
            continue
        lines.append(f"mkdir -p {_q(target)} 2>/dev/null || true")
        lines.append(f"mount --bind {_q(source)} {_q(target)}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {_q(target)}")
    for hide in hidden:
        lines.append(f"mount -t tmpfs -o mode=0700,size=64k hidden {_q(str(hide))}")
    lines.append(f"mount --move {STAGED_TMP} /tmp && rmdir {STAGED_TMP}")
    lines.append(f"cd {WORKDIR}")
    if iso.account is not None and iso.setpriv is not None:
        a = iso.account
        drop = f"exec {iso.setpriv} --reuid={a.uid} --regid={a.gid} --clear-groups "
        lines.append(drop + '--inh-caps=-all --bounding-set=-all -- "$@"')
    else:
        lines.append('exec "$@"')
    head = [iso.unshare, "-m", "--propagation", "private"]
    if iso.account is None and os.geteuid() != 0:
        head.append("-r")
    return [*head, "/bin/sh", "-c", "\n".join(lines), "tuneplane-member", *order.command]


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
