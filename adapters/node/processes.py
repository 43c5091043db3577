"""The node daemon's host-process executor (the ``MemberRuntime`` port without a container
engine: `tp node run --executor process`; docs/node-backend.md, "Host processes").

Each member is a process group started from its verified Job Capsule, as a container would be,
with the same contract: its view of the host holds the capsule at ``/tuneplane/capsule``, its
working directory at ``/workspace`` and the node's directories (shared, metrics, outputs,
checkpoints) where a container has them, bind-mounted in a private mount namespace of its own
(``unshare``), in which the daemon's state directory (its credential, its journal, every other
member's files) is covered by an empty tmpfs. As root, the member runs as an unprivileged
account (``tuneplane-member`` by default, made if missing); its environment is built afresh
(never the daemon's), with its GPUs bound by UUID in ``CUDA_VISIBLE_DEVICES``; its CPU and
memory limits are set through cgroups where the host allows it (``adapters/node/cgroups.py``).

Two-phase launch as with containers: :meth:`prepare` makes ``<root>/<member>/`` (its record, its
launch, the capsule or source unpacked, its cgroups) in a directory renamed into place, so a
prepare cut short leaves nothing; :meth:`start` starts its supervisor, ``process_shim.py``,
which records the member's pid and start time durably before the member runs and its exit code
when it ends. A restarted daemon re-adopts members from these records: a process is the member
only if its pid, its start time and the boot match; a member whose process is gone and whose
exit was never recorded ended (proof: its process no longer exists) with its exit code lost.
The "container id" of a member is ``proc-<member id>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from adapters.child_env import passed_on
from adapters.container_engine.spec import WORKDIR, exit_reason, source_tar
from adapters.node import cgroups
from adapters.node.cgroup_paths import usage_source_of
from adapters.node.host_ports import port_free
from adapters.node.member_view import NodeDirs
from adapters.node.process_isolation import Isolation, member_argv
from adapters.node.process_records import (
    alive,
    machine_id,
    member_record,
    read_from,
    read_json,
    signal_group,
    supervised,
)
from adapters.node.process_shim import write_atomic
from domain.capsule import CAPSULE_DIR
from domain.errors import Conflict, InvalidInput
from domain.node_daemon_ports import FoundContainer, ProgressCallback
from domain.node_messages import PrepareOrder
from domain.node_protocol import MemberRef
from domain.ports import Observation
from domain.requests import require_limits
from domain.telemetry import UsageSource

log = logging.getLogger("tuneplane.node.processes")

PREFIX = "proc-"
SHIM = Path(__file__).with_name("process_shim.py")
RUNTIME_ENV = "TUNEPLANE_RUNTIME"  # the job's runtime's name, in every member's environment
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED = ("LANG", "LC_ALL", "TZ")  # the only variables a member takes from the daemon
FOLLOW_POLL = 0.2
Source = bytes | str | os.PathLike[str]


def _quiet(stage: str, fraction: float, detail: str) -> None:
    return None


class ProcessExecutor:
    """Runs node ``node``'s members as host processes; their files under ``root`` (inside
    ``state_dir``, which members never see)."""

    def __init__(
        self,
        node: str,
        root: Path,
        state_dir: Path,
        isolation: Isolation,
        *,
        gpu_uuids: Mapping[int, str] | None = None,
        runtime_dirs: Mapping[str, str] | None = None,
        dirs: NodeDirs | None = None,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.node = node
        # covered by an empty tmpfs in every member's view, as the state directory is: the
        # roots that hold other members' files (their outputs, when kept outside the state)
        self.hidden = tuple(
            p for p in hidden if not p.resolve().is_relative_to(state_dir.resolve())
        )
        self.root = root
        self.state_dir = state_dir
        self.isolation = isolation
        self.gpu_uuids = dict(gpu_uuids or {})
        self.runtime_dirs = dict(runtime_dirs or {})
        self.dirs = dirs or NodeDirs()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._stopped: set[str] = set()  # members this process stopped (not ended from outside)
        self._locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    def _dir(self, container_id: str) -> Path:
        member = container_id.removeprefix(PREFIX)
        if not container_id.startswith(PREFIX) or not member or "/" in member or member[0] == ".":
            raise InvalidInput(f"{container_id!r} is not a host-process member's id")
        return self.root / member

    # -- prepare (phase one) ------------------------------------------------------------------

    async def prepare(
        self, order: PrepareOrder, source: Source | None, on_progress: ProgressCallback = _quiet
    ) -> str:
        """Make the member ready to start; return its id. Idempotent; InvalidInput (a reason to
        vote no) leaves nothing behind; Conflict when the id is another node's or installation's."""
        member = order.ref.member_id
        cid = PREFIX + member
        require_limits(order.cpus, order.memory_mb, f"member {member}")
        missing = [i for i in order.gpu_indices if i not in self.gpu_uuids]
        if missing:
            raise InvalidInput(
                f"GPUs {', '.join(map(str, missing))} are not GPUs of node {self.node} "
                f"(it has {', '.join(map(str, sorted(self.gpu_uuids))) or 'none'})",
                fix="check the node's GPU inventory (`tp fleet ls`) and its --gpus",
            )
        tar = await asyncio.to_thread(_read_source, source) if source is not None else None
        async with self._locks.setdefault(cid, asyncio.Lock()):
            done = self.root / member
            if (done / "member.json").exists():
                self._check_owner(done, order.installation)
                return cid
            on_progress("preparing", 1.0, member)
            view = await self.dirs.view(order)
            try:
                await asyncio.to_thread(self._make, order, tar, view.env, view.binds, done)
            except OSError as exc:
                raise InvalidInput(
                    f"member {member} cannot be prepared on node {self.node}: {exc}",
                    fix="free disk space in the node's state directory, or see the daemon's log",
                ) from None
            return cid

    def _check_owner(self, path: Path, installation: str) -> None:
        record = read_json(path / "member.json") or {}
        if record.get("node") != self.node or record.get("installation") != installation:
            raise Conflict(
                f"member directory {path} belongs to node {record.get('node')!r} of installation "
                f"{record.get('installation')!r}, not to node {self.node!r} of {installation!r}",
                fix="give each node daemon a state directory of its own",
            )

    def _make(
        self,
        order: PrepareOrder,
        tar: bytes | None,
        env: dict[str, str],
        binds: list[Any],
        done: Path,
    ) -> None:
        member = order.ref.member_id
        tmp = self.root / f".prepare-{member}"
        shutil.rmtree(tmp, ignore_errors=True)
        groups: tuple[str, ...] = ()
        try:
            fs = tmp / "fs"
            (fs / "workspace").mkdir(parents=True, mode=0o755)
            (fs / "tmp").mkdir(mode=0o1777)  # its own /tmp, as a container has
            os.chmod(fs / "tmp", 0o1777)
            if tar is not None:
                where = fs if order.capsule else fs / "workspace"
                _unpack(tar, where, capsule=order.capsule)
            account = self.isolation.account
            if account is not None:
                for path in [fs / "workspace", *(fs / "workspace").rglob("*")]:
                    os.lchown(path, account.uid, account.gid)
                for bind in binds:
                    if bind.member_writes:
                        os.chown(bind.source, account.uid, account.gid)
            groups = self.isolation.cgroups.make(self.node, member, order.cpus, order.memory_mb)
            final = self.root / member / "fs"  # where ``fs`` is once renamed into place
            hidden = (*self.hidden, self.state_dir)
            launch = {
                "argv": member_argv(self.isolation, order, final, binds, hidden),
                "env": self._env(order, env),
                "cgroups": list(groups),
            }
            write_atomic(str(tmp / "launch.json"), launch)
            write_atomic(str(tmp / "member.json"), member_record(order, self.node, groups))
            os.replace(tmp, done)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            cgroups.remove(groups)
            raise

    def _env(self, order: PrepareOrder, env: dict[str, str]) -> dict[str, str]:
        base = passed_on(PASSED)
        path = passed_on(("PATH",)).get("PATH") or DEFAULT_PATH
        runtime = self.runtime_dirs.get(env.get(RUNTIME_ENV, ""))
        if runtime:
            path = f"{runtime}:{path}"
        base.update(PATH=path, HOME=WORKDIR, USER=self._user(), LOGNAME=self._user())
        base.update(env)  # the job's own environment wins, PATH included (as in a container)
        base["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_uuids[i] for i in order.gpu_indices)
        return base

    def _user(self) -> str:
        account = self.isolation.account
        return account.name if account else (passed_on(("USER",)).get("USER") or "member")

    # -- commit, watch, stop, abort -----------------------------------------------------------

    async def start(self, container_id: str) -> None:
        """Start the member's supervisor (the commit). Idempotent: a member started before is
        left alone (the shim refuses a second start); a missing one is left for
        :meth:`observe` to report missing."""
        path = self._dir(container_id)
        if not (path / "launch.json").exists():
            log.warning("member %s is gone: nothing to start", container_id)
            return
        if (path / "started.json").exists() or (path / "exit.json").exists():
            return
        await asyncio.to_thread(self._spawn_shim, path)

    def _spawn_shim(self, path: Path) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-I", str(SHIM), str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": DEFAULT_PATH},
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # started.json is durable before the member runs
            if (path / "started.json").exists() or proc.poll() is not None:
                break
            time.sleep(0.01)
        _reap_later(proc)

    async def observe(self, container_id: str) -> Observation:
        """starting (prepared), running, exited (code, reason) or missing."""
        return await asyncio.to_thread(self._observe, container_id)

    inspect = observe

    def _observe(self, container_id: str) -> Observation:
        """What the member's records and the host prove. Records damaged on disk never read as
        an end: while anything of the member may run, it is running or unknown."""
        path = self._dir(container_id)
        if not path.is_dir():
            return Observation("missing")
        groups = tuple((read_json(path / "member.json") or {}).get("cgroups") or ())
        ended = read_json(path / "exit.json")
        if ended is not None and isinstance(ended.get("code"), int):
            return self._exited(container_id, ended["code"], groups)
        started = read_json(path / "started.json")
        watched = supervised(path / "shim.lock")
        if started is None:
            damaged = (path / "started.json").exists() or (path / "exit.json").exists()
            if watched or (damaged and cgroups.pids(groups)):
                return Observation("running")
            if damaged:
                return Observation("unknown", reason=f"the records in {path} are damaged")
            return Observation("starting")
        if alive(started) or watched or cgroups.pids(groups):
            return Observation("running")  # or its shim is about to record the exit
        return Observation(
            "exited",
            None,
            "the member's process ended while no supervisor watched it (its supervisor was "
            "killed, or the host restarted): its exit code is lost",
        )

    def _exited(self, container_id: str, code: int, groups: tuple[str, ...]) -> Observation:
        oom = code == 137 and cgroups.oom_kills(groups) > 0
        reason = exit_reason(code, oom=oom)
        if container_id not in self._stopped and code in (137, 143) and not oom:
            reason = f"{reason} (a signal TunePlane did not send)".lstrip()
        return Observation("exited", code, reason)

    async def stop(self, container_id: str, grace_seconds: float) -> None:
        """SIGTERM to the member's process group, SIGKILL to it and its cgroup after the
        grace; a member never started is removed instead."""
        path = self._dir(container_id)
        started = read_json(path / "started.json")
        if started is None and not supervised(path / "shim.lock"):
            await self.remove(container_id)
            return
        self._stopped.add(container_id)
        if started is not None and alive(started):
            signal_group(started, signal.SIGTERM)
        deadline = time.monotonic() + max(0.0, grace_seconds)
        while time.monotonic() < deadline:
            if (await self.observe(container_id)).status != "running":
                return
            await asyncio.sleep(0.1)
        await asyncio.to_thread(self._kill, path)

    def _kill(self, path: Path) -> None:
        started = read_json(path / "started.json")
        if started is not None and alive(started):
            signal_group(started, signal.SIGKILL)
        record = read_json(path / "member.json") or {}
        cgroups.kill(tuple(record.get("cgroups") or ()))
        deadline = time.monotonic() + 5
        while supervised(path / "shim.lock") and time.monotonic() < deadline:
            time.sleep(0.02)  # its shim records the exit

    async def remove(self, container_id: str) -> None:
        """Kill whatever of the member runs, then remove its files and cgroups. Missing is fine."""
        path = self._dir(container_id)
        if not path.exists():
            return
        await asyncio.to_thread(self._kill, path)
        record = read_json(path / "member.json") or {}
        await asyncio.to_thread(cgroups.remove, tuple(record.get("cgroups") or ()))
        await asyncio.to_thread(shutil.rmtree, path, True)

    async def usage_source(self, container_id: str) -> UsageSource | None:
        """The member's first process (as recorded, if it is still that process) and its
        cgroups, where its CPU and memory use are read; None unless it runs."""
        started = read_json(self._dir(container_id) / "started.json")
        if started is None or not alive(started):
            return None
        return await asyncio.to_thread(usage_source_of, int(started["pid"]))

    async def held(self, installation: str) -> dict[str, str]:
        """member id → id of every member of this node and ``installation`` under the root, and
        of every member whose record cannot be read (it may be one of them)."""

        def scan() -> dict[str, str]:
            found = {}
            for path in self.root.iterdir():
                if path.name.startswith(".") or not path.is_dir():
                    continue  # a prepare under way, or cut short (removed at the next one)
                record = read_json(path / "member.json")
                mine = record is None or (  # damaged: listed, never proved gone by omission
                    record.get("node") == self.node and record.get("installation") == installation
                )
                if mine:
                    found[path.name] = PREFIX + path.name
            return found

        return await asyncio.to_thread(scan)

    async def engine_id(self) -> str:
        """This host's processes under this root: the machine's id and the root."""
        machine = await asyncio.to_thread(machine_id)
        return f"host-processes:{machine or socket.gethostname()}:{self.root}"

    async def found(self, container_id: str) -> FoundContainer | None:
        path = self._dir(container_id)
        record = read_json(path / "member.json")
        if record is None:
            return None
        ref = None
        with contextlib.suppress(KeyError, TypeError, ValueError):
            r = record["ref"]
            ref = MemberRef(
                str(r["attempt_id"]), str(r["member_id"]), int(r["index"]), int(r["epoch"])
            )
        return FoundContainer(
            container_id=container_id,
            ref=ref,
            job_id=str(record.get("job_id", "")),
            image=str(record.get("image", "")),
            gpu_indices=tuple(int(g) for g in record.get("gpu_indices") or ()),
            cpus=float(record.get("cpus", 0)),
            memory_mb=int(record.get("memory_mb", 0)),
            started=(path / "started.json").exists() or (path / "exit.json").exists(),
            metrics=bool(record.get("metrics")),
        )

    async def final_log(self, container_id: str, limit: int) -> tuple[bytes, bool]:
        """The last ``limit`` bytes of its output and whether the head was cut."""
        log_path = self._dir(container_id) / "log"

        def tail() -> tuple[bytes, bool]:
            try:
                with open(log_path, "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(0, size - limit))
                    return f.read(limit), size > limit
            except FileNotFoundError:
                return b"", False

        return await asyncio.to_thread(tail)

    async def follow_logs(self, container_id: str) -> AsyncIterator[bytes]:
        """Its output from the start, as it comes, until it exits."""
        path = self._dir(container_id)
        offset = 0
        while True:
            ended = (path / "exit.json").exists() or not path.exists()
            chunk = await asyncio.to_thread(read_from, path / "log", offset)
            if chunk:
                offset += len(chunk)
                yield chunk
                continue
            if ended or (await self.observe(container_id)).status in ("exited", "missing"):
                return
            await asyncio.sleep(FOLLOW_POLL)

    port_free = staticmethod(port_free)
    check_port_free = port_free


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """The shim is not waited for here (it outlives the daemon); reap it when it exits so it
    leaves no zombie while the daemon runs."""
    import threading

    threading.Thread(target=proc.wait, name="tp-shim-reaper", daemon=True).start()


def _unpack(tar: bytes, where: Path, *, capsule: bool) -> None:
    import io

    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
        archive.extractall(where, filter="data")
    if capsule and not (where / CAPSULE_DIR.lstrip("/")).is_dir():
        raise InvalidInput(
            "the Job Capsule's archive holds no tuneplane/capsule directory",
            fix="submit again: the preview builds the capsule",
        )


def _read_source(source: Source) -> bytes:
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    return source_tar(data)
