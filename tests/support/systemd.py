"""A real systemd for a test: this machine's own `/lib/systemd/systemd` booted as PID 1 of new
PID, mount and cgroup namespaces (the machine's init is not systemd), sharing the network.

It boots nothing but what the test gives it. Its unit search path is the test's directory and a
private `/etc/systemd/system` (a tmpfs), through `SYSTEMD_UNIT_PATH`: none of the distribution's
units exist for it, so none of the boot units that would act on the machine runs (tmpfiles'
`--remove` empties /tmp, sysctl and sysusers change the kernel's settings and /etc). The
targets units ask for (sysinit, basic, multi-user, network-online, ...) are empty ones written
here. `/run` is a tmpfs of its own, and it mounts its own cgroup file systems in a cgroup
namespace rooted at a subtree made for it, so it moves no process but its own. Stopping it
kills the namespace's PID 1, which kills every process in it, then removes the subtree; a boot
first sweeps away those of test processes that died without stopping theirs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.netlab import alive

SYSTEMD = Path("/lib/systemd/system")
TARGETS = (
    "sysinit", "basic", "multi-user", "network", "network-online", "network-pre", "shutdown",
    "sockets", "timers", "paths", "slices", "local-fs", "local-fs-pre", "remote-fs", "swap",
)  # fmt: skip

# PID 1 of the namespaces: private mounts, then systemd on the test's units only
BOOT = """#!/bin/bash
set -e
mount --make-rprivate /
mount -t tmpfs -o mode=755 tmpfs /run
umount -R -l /sys/fs/cgroup  # systemd mounts its own, rooted at our cgroup namespace
mount -t tmpfs -o mode=755 tmpfs /etc/systemd/system
export container=other SYSTEMD_UNIT_PATH="/etc/systemd/system:$1"
exec /lib/systemd/systemd --system --unit=tp-test.target --log-target=kmsg --show-status=no
"""
# a cgroup of its own in every hierarchy (the cgroup namespace's root), then the namespaces
LAUNCH = """#!/bin/bash
set -e
cgroups=$(cat /proc/self/cgroup)  # read before moving: the file changes as we move
while IFS=: read -r _ ctrl path; do
  case "$ctrl" in
    "") dir=/sys/fs/cgroup/unified ;;
    name=systemd) dir=/sys/fs/cgroup/systemd ;;
    *) dir=/sys/fs/cgroup/${ctrl%%,*} ;;
  esac
  [ -d "$dir" ] || dir=/sys/fs/cgroup  # cgroup v2 alone
  [ -w "$dir$path" ] || continue
  mkdir -p "$dir$path/$2"
  if [ "$ctrl" = cpuset ]; then
    cat "$dir$path/cpuset.cpus" > "$dir$path/$2/cpuset.cpus"
    cat "$dir$path/cpuset.mems" > "$dir$path/$2/cpuset.mems"
  fi
  echo "$dir$path/$2" >> "$3"
  echo $$ > "$dir$path/$2/cgroup.procs"
done <<< "$cgroups"
exec unshare --pid --fork --mount --cgroup --uts --ipc --mount-proc "$1/boot.sh" "$1/units"
"""


@dataclass
class Systemd:
    root: Path
    proc: subprocess.Popen[bytes]
    pid: int  # systemd's, in this machine's PID namespace

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the namespaces (as a shell on that machine would run it)."""
        enter = ["nsenter", "-t", str(self.pid), "-m", "-p", "-C", "--"]
        return subprocess.run(
            [*enter, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )

    def systemctl(self, *args: str) -> str:
        return self.run("systemctl", *args).stdout.strip()

    def show(self, unit: str, prop: str) -> str:
        return self.systemctl("show", "-p", prop, "--value", unit)


def _systemd_pid(launcher: subprocess.Popen[bytes], deadline: float) -> int:
    """The PID of the launcher's child (the launcher became `unshare --fork`; its child, the
    boot script, becomes systemd)."""
    pid = launcher.pid
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise RuntimeError(f"systemd's launcher exited with {launcher.returncode}")
        with contextlib.suppress(OSError, ValueError):
            [child] = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if Path(f"/proc/{child}/exe").resolve().name == "systemd":
                return int(child)
        time.sleep(0.05)
    raise RuntimeError("systemd did not start in its namespaces")


def sweep_stale() -> None:
    """Kill and remove the systemds of test processes that are gone (a run killed before its
    clean-up): their cgroups are named ``tp-systemd-<pytest pid>-…`` in every hierarchy."""
    tops = [Path(p) for p in glob.glob("/sys/fs/cgroup/*/tp-systemd-*")]
    tops += [Path(p) for p in glob.glob("/sys/fs/cgroup/memory/**/tp-systemd-*", recursive=True)]
    stale = [t for t in tops if not alive(int(t.name.split("-")[2]))]
    for top in stale:
        for procs in top.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    _remove_cgroups(stale)


@contextlib.contextmanager
def booted(root: Path, timeout: float = 30) -> Iterator[Systemd]:
    """systemd booted in ``root`` (its scripts, units and the list of its cgroups), running
    (``systemctl is-system-running``) when this yields; killed with its namespace after."""
    sweep_stale()
    units = root / "units"
    units.mkdir(parents=True)
    for name in (*TARGETS, "tp-test"):
        (units / f"{name}.target").write_text(
            f"[Unit]\nDescription={name} (empty: the test boots nothing else)\n"
        )
    for name, text in (("boot.sh", BOOT), ("launch.sh", LAUNCH)):
        (root / name).write_text(text)
        (root / name).chmod(0o755)
    cgroups = root / "cgroups"
    with (root / "launch.log").open("wb") as log:
        launcher = subprocess.Popen(
            [str(root / "launch.sh"), str(root), f"tp-systemd-{os.getpid()}-{root.name}",
             str(cgroups)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    pid = 0
    try:
        pid = _systemd_pid(launcher, deadline)
        systemd = Systemd(root, launcher, pid)
        state = ""
        while time.monotonic() < deadline:
            state = systemd.systemctl("is-system-running")
            if state in ("running", "degraded"):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"systemd is {state or 'silent'} after {timeout} s")
        yield systemd
    finally:
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: every process in it dies
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(30)
        if cgroups.exists():
            _remove_cgroups([Path(line) for line in cgroups.read_text().split()])


def _remove_cgroups(tops: list[Path], timeout: float = 10) -> None:
    """The subtrees made for systemd (one per hierarchy), once their processes are gone."""
    deadline = time.monotonic() + timeout
    while tops and time.monotonic() < deadline:
        left = []
        for top in tops:
            for d in [*sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True), top]:
                with contextlib.suppress(FileNotFoundError, OSError):
                    d.rmdir()
            if top.exists():
                left.append(top)
        tops = left
        if tops:
            time.sleep(0.1)
