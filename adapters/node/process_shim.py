"""The supervisor of one host-process member (``adapters/node/processes.py``), run as
``python3 -I process_shim.py MEMBER_DIR``: standard library only, no package imported.

The node daemon starts it in a session of its own, so it outlives a daemon that dies (kill -9
included) and the member is re-adopted at the daemon's next start. It:

1. holds ``shim.lock`` for its whole life (the daemon's proof that a supervisor is alive);
2. never starts a member twice: a member directory with ``started.json`` is left alone;
3. forks the member's first process, which makes its own session and process group, joins the
   member's cgroups, says so on a pipe and then WAITS for a byte on another before it execs
   the member's command;
4. records ``started.json`` (the member's pid and start time, its own, and the boot id), synced
   to disk, and only then sends the byte: a member never runs without a durable record of it. A
   shim that dies before (kill -9) leaves a child that reads end-of-file and exits unstarted;
5. waits for the member's first process and records ``exit.json`` (its exit code, 128 + the
   signal when a signal ended it), atomically.

Signals the daemon's process group gets (Ctrl-C on `tp up`) never reach it: it ignores SIGINT,
SIGTERM and SIGHUP; the daemon stops a member by signalling the member's process group and its
cgroup, not the shim.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Mapping


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): with
    the pid, what tells a process from a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of the whole line; the 20th after the name
    except (IndexError, ValueError):
        return None


def write_atomic(path: str, body: Mapping[str, object]) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(body).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _child(launch: dict[str, object], log: int, ready: int, go: int) -> None:
    """In the forked child: never returns."""
    try:
        os.setsid()  # its own session and process group, which a stop signals as a whole
        for group in launch.get("cgroups") or []:  # type: ignore[attr-defined]
            with open(os.path.join(str(group), "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        os.write(ready, b"r")  # the group exists: the parent may record it
        os.close(ready)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if os.read(go, 1) != b"x":
            os._exit(0)  # the shim died before it recorded the start: the member never runs
        argv = [str(a) for a in launch["argv"]]  # type: ignore[attr-defined]
        env = {str(k): str(v) for k, v in launch["env"].items()}  # type: ignore[attr-defined]
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # anything here ends the child, said in the member's log
        try:
            os.write(2, f"tuneplane-shim: the member could not be started: {exc}\n".encode())
        finally:
            os._exit(127)


def end_the_rest(pid: int, groups: list[str]) -> None:
    """The member's first process ended: nothing of it runs on (as a container ends with its
    init), neither its process group nor what left the group but not its cgroups."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    for _ in range(100):
        left: set[int] = set()
        for group in groups:
            try:
                with open(os.path.join(group, "cgroup.procs")) as f:
                    left.update(int(p) for p in f.read().split() if p.isdigit())
            except OSError:
                continue
        if not left:
            return
        for other in left:
            with contextlib.suppress(OSError):
                os.kill(other, signal.SIGKILL)
        time.sleep(0.02)


def main(directory: str) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

    def path(name: str) -> str:
        return os.path.join(directory, name)

    lock = os.open(path("shim.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)  # held while it lives; a second shim waits, then leaves
    if os.path.exists(path("started.json")) or os.path.exists(path("exit.json")):
        return 0  # started once already: never twice
    with open(path("launch.json")) as f:
        launch = json.load(f)
    log = os.open(path("log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    go_read, go_write = os.pipe()
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        os.close(ready_read)
        os.close(lock)
        _child(launch, log, ready_write, go_read)
    os.close(go_read)
    os.close(ready_write)
    os.read(ready_read, 1)  # b"": the child failed before it made its group (its exit says why)
    os.close(ready_read)
    record = {
        "pid": pid,
        "start": start_time(pid),
        "shim_pid": os.getpid(),
        "shim_start": start_time(os.getpid()),
        "boot_id": boot_id(),
        "at": time.time(),
    }
    write_atomic(path("started.json"), record)
    with contextlib.suppress(OSError):  # else the child ended before its go (its log says why)
        os.write(go_write, b"x")
    os.close(go_write)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    end_the_rest(pid, launch.get("cgroups") or [])
    write_atomic(path("exit.json"), {"code": code if code >= 0 else 128 - code, "at": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
