"""`tp up`'s node path: the node control gateway, the telemetry gateway and a node daemon for
this machine (with its collector), each its own process, started the way an operator would start
them (`tp gateway node`, `tp gateway telemetry`, `tp node run`).

The local daemon enrolls once into pool ``local`` (a join token is made for it directly) and
keeps its journal and credential in ``<state dir>/node``. Every child is kept running by
``entrypoints.supervise`` on an event loop of its own thread (the API serves on the main one): a
child that exits (a crash, kill -9, an operator's ``kill $(cat <state>/CHILD.pid)`` to restart
it) is logged with its exit status and started again with the same settings, after a back-off
that resets after a healthy run. Stopping `tp up` stops them all; running members keep running in
the engine and are re-adopted at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from adapters.child_env import child_environ
from adapters.tls import ensure_dev_pki
from application.context import Context
from application.enrollment import create_join_token
from domain.auth import Principal, Role
from domain.errors import Unavailable
from domain.fleet import NODE_BACKEND
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.containers.setup import SetupContainer
from entrypoints.fleet_config import host_resources
from entrypoints.gateway import gateway_names
from entrypoints.process import READY_ENV
from entrypoints.settings import Settings
from entrypoints.supervise import Process, Supervisor, spawn_logged

LOCAL = "local"
_TP = [sys.executable, "-m", "entrypoints.cli.main"]
T = TypeVar("T")


@dataclass
class NodePath:
    """The supervised children, on an event loop running in a thread of its own."""

    lines: list[str] = field(default_factory=list)
    supervisors: list[Supervisor] = field(default_factory=list)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _thread: threading.Thread | None = None
    # the set-up container of this loop (the local pool's backend, the daemon's join tokens)
    resources: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the children's loop and wait for its result."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.loop.run_forever, name="tp-up-children", daemon=True
            )
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    async def supervise(self, supervisor: Supervisor) -> Process:
        """Start a child now and keep it running from then on."""
        proc = await supervisor.start()
        self.supervisors.append(supervisor)
        self._tasks.append(asyncio.create_task(supervisor.run()))
        return proc

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)  # each stops its child
        for supervisor in self.supervisors:  # started, but its supervision never began
            await supervisor.stop()
        await self.resources.aclose()

    def stop(self) -> None:
        if self._thread is None:
            return
        with contextlib.suppress(RuntimeError):
            self.call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self._thread = None


async def _local_pool_is_node_pool(ctx: Context) -> bool:
    async with ctx.units.fleet() as uow:
        pool = next((p for p in await uow.fleet.pools() if p.name == LOCAL), None)
    return pool is not None and pool.backend == NODE_BACKEND


async def _join_token(ctx: Context) -> str:
    admin = Principal("tp-up", Role.ADMIN)
    secret, _ = await create_join_token(ctx, admin, LOCAL, LOCAL, timedelta(minutes=10))
    return secret


LISTEN_SECONDS = 30  # how long a gateway may take to listen at its first start


async def _listening(port: int, proc: Process, log: Path, what: str) -> None:
    """Wait until ``proc`` itself says it listens on ``port`` (its ready file holds its pid: a
    port that answers may be another process's); the end of its log if it exits first."""
    ready = _ready_file(log)
    try:
        async with asyncio.timeout(LISTEN_SECONDS):
            while proc.returncode is None:
                with contextlib.suppress(OSError):
                    if ready.read_text().strip() == str(proc.pid):
                        return
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise Unavailable(
            f"the {what} did not listen on {port} in {LISTEN_SECONDS} s", fix=f"see {log}"
        ) from None
    said, fixes = _what_it_said(_tail(log))
    raise Unavailable(
        f"the {what} exited with {proc.returncode}: {said}",
        fix=f"{fixes[-1]} (log {log})" if fixes else f"see {log}",  # the child's own fix
    )


def _what_it_said(tail: str) -> tuple[str, list[str]]:
    """The end of a child's log as (what it said, the fixes it gave): its lines but the
    ``fix: …`` ones (text), or its records' ``msg`` and ``fix`` (TUNEPLANE_LOG_FORMAT=json)."""
    said: list[str] = []
    fixes: list[str] = []
    for line in tail.splitlines():
        record = None
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                record = json.loads(line)
        if isinstance(record, dict) and "msg" in record:
            said.append(str(record["msg"]))
            if record.get("fix"):
                fixes.append(str(record["fix"]))
        elif line.startswith("fix: "):
            fixes.append(line.removeprefix("fix: "))
        else:
            said.append(line)
    return "\n".join(said).strip(), fixes


def _ready_file(log: Path) -> Path:
    return log.with_suffix(".ready")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-1500:]


def _child(name: str, args: list[str], env: dict[str, str], log: Path) -> Supervisor:
    """A supervisor for ``args`` whose output goes to ``log``, with a pid file and a ready file
    beside it (the child writes its pid there once it serves)."""
    ready = _ready_file(log)

    async def spawn() -> Process:
        ready.unlink(missing_ok=True)
        return await spawn_logged(args, log, {**env, READY_ENV: str(ready)})

    return Supervisor(name, spawn, log_path=log, pid_file=log.with_suffix(".pid"))


def start_node_path(settings: Settings) -> NodePath:
    """Start the gateways and, if pool ``local`` is a node pool, this machine's daemon; they
    are supervised until ``NodePath.stop``. On an error the children started are stopped."""
    path = NodePath()
    try:
        path.call(_start(path, settings))
    except BaseException:
        path.stop()
        raise
    return path


async def _start(path: NodePath, settings: Settings) -> None:
    env = child_environ()
    env.update(
        TUNEPLANE_DATABASE_URL=settings.database_url or "",
        TUNEPLANE_STATE_DIR=str(settings.state_dir),
        TUNEPLANE_NODE_GATEWAY_PORT=str(settings.node_gateway_port),
        TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(settings.telemetry_gateway_port),
    )
    if settings.docker_host:
        env["DOCKER_HOST"] = settings.docker_host
    state = settings.state_dir
    pki = ensure_dev_pki(state, gateway_names(settings))
    log = state / "gateway.log"
    gateway = _child("the node gateway", [*_TP, "gateway", "node"], env, log)
    proc = await path.supervise(gateway)
    await _listening(settings.node_gateway_port, proc, log, "node gateway")
    where = f"127.0.0.1:{settings.node_gateway_port}"
    path.lines.append(f"node gateway: {where} (TLS; nodes trust {pki.ca.cert}; log {log})")
    log = state / "telemetry-gateway.log"
    telemetry = _child("the telemetry gateway", [*_TP, "gateway", "telemetry"], env, log)
    proc = await path.supervise(telemetry)
    await _listening(settings.telemetry_gateway_port, proc, log, "telemetry gateway")
    metrics_at = f"127.0.0.1:{settings.telemetry_gateway_port}"
    path.lines.append(f"telemetry gateway: {metrics_at} (TLS; log {log})")
    container = SetupContainer(settings=settings)
    ctx = await resolve((await path.resources.enter_async_context(started(container))).context)
    if not await _local_pool_is_node_pool(ctx):
        path.lines.append("no local node daemon: pool local is not a node pool")
        return
    node_dir = state / "node"
    cpus, memory = host_resources()
    args = [
        *_TP, "node", "run",
        "--server", where,
        "--ca", str(pki.ca.cert),
        "--state-dir", str(node_dir),
        "--name", LOCAL,
        "--advertise-address", "127.0.0.1",
        "--cpus", f"{cpus:g}",
        "--memory-mb", str(memory),
        "--telemetry-gateway", metrics_at,
    ]  # fmt: skip
    node_log = state / "node.log"

    async def spawn_daemon() -> Process:
        daemon_env = dict(env)
        if not (node_dir / "credential").exists():  # by environment: never on a command line
            daemon_env["TUNEPLANE_JOIN_TOKEN"] = await _join_token(ctx)
        return await spawn_logged(args, node_log, daemon_env)

    daemon = Supervisor(
        "the local node daemon", spawn_daemon, log_path=node_log, pid_file=state / "node.pid"
    )
    await path.supervise(daemon)
    path.lines.append(f"local node daemon: node {LOCAL} (state {node_dir}; log {node_log})")
    path.lines.append(
        f"each of them is started again if it exits; restart one with "
        f"`kill $(cat {state}/NAME.pid)` (gateway, telemetry-gateway, node)"
    )
