"""`tp up`'s node path: the node control gateway, the telemetry gateway and a node daemon for
this machine (with its collector), each its own process, started the way an operator would start
them (`tp gateway node`, `tp gateway telemetry`, `tp node run`).

The local daemon enrolls once into pool ``local`` (a join token is made for it directly) and
keeps its journal and credential in ``<state dir>/node``. Stopping `tp up` stops both
processes; running members keep running in the engine and are re-adopted at the next start.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from adapters.tls import ensure_dev_pki
from application.enrollment import NODE_BACKEND, create_join_token
from domain.auth import Principal, Role
from domain.errors import Unavailable
from entrypoints.container import Container
from entrypoints.fleet_config import host_resources
from entrypoints.gateway import gateway_names
from entrypoints.settings import Settings

LOCAL = "local"
_TP = [sys.executable, "-m", "entrypoints.cli.main"]


@dataclass
class NodePath:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _local_pool_is_node_pool(settings: Settings) -> bool:
    container = Container(settings=settings)
    await container.init_resources()  # type: ignore[misc]
    try:
        ctx = await container.context()  # type: ignore[misc]
        async with ctx.uow() as uow:
            pool = next((p for p in await uow.fleet.pools() if p.name == LOCAL), None)
        return pool is not None and pool.backend == NODE_BACKEND
    finally:
        await container.shutdown_resources()  # type: ignore[misc]


async def _join_token(settings: Settings) -> str:
    container = Container(settings=settings)
    await container.init_resources()  # type: ignore[misc]
    try:
        ctx = await container.context()  # type: ignore[misc]
        admin = Principal("tp-up", Role.ADMIN)
        secret, _ = await create_join_token(ctx, admin, LOCAL, LOCAL, timedelta(minutes=10))
        return secret
    finally:
        await container.shutdown_resources()  # type: ignore[misc]


def _wait_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, what: str, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Unavailable(
                f"the {what} exited with {proc.returncode}: "
                + log.read_text(errors="replace")[-1500:],
                fix=f"see {log}",
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise Unavailable(f"the {what} did not listen on {port} in {timeout:.0f} s")


def start_node_path(settings: Settings) -> NodePath:
    """Start the gateway and, if pool ``local`` is a node pool, this machine's daemon."""
    path = NodePath()
    env = dict(os.environ)
    env.update(
        TUNEPLANE_DATABASE_URL=settings.database_url or "",
        TUNEPLANE_STATE_DIR=str(settings.state_dir),
        TUNEPLANE_NODE_GATEWAY_PORT=str(settings.node_gateway_port),
        TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(settings.telemetry_gateway_port),
    )
    if settings.docker_host:
        env["DOCKER_HOST"] = settings.docker_host
    pki = ensure_dev_pki(settings.state_dir, gateway_names(settings))
    log = settings.state_dir / "gateway.log"
    gateway = subprocess.Popen(
        [*_TP, "gateway", "node"], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    path.procs.append(gateway)
    _wait_port(settings.node_gateway_port, gateway, log, "node gateway")
    where = f"127.0.0.1:{settings.node_gateway_port}"
    path.lines.append(f"node gateway: {where} (TLS; nodes trust {pki.ca.cert}; log {log})")
    telemetry_log = settings.state_dir / "telemetry-gateway.log"
    telemetry = subprocess.Popen(
        [*_TP, "gateway", "telemetry"],
        env=env,
        stdout=telemetry_log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    path.procs.append(telemetry)
    _wait_port(settings.telemetry_gateway_port, telemetry, telemetry_log, "telemetry gateway")
    metrics_at = f"127.0.0.1:{settings.telemetry_gateway_port}"
    path.lines.append(f"telemetry gateway: {metrics_at} (TLS; log {telemetry_log})")
    if not asyncio.run(_local_pool_is_node_pool(settings)):
        path.lines.append("no local node daemon: pool local is not a node pool")
        return path
    node_dir = settings.state_dir / "node"
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
    daemon_env = dict(env)
    if not (node_dir / "credential").exists():  # by environment: never on a command line
        daemon_env["TUNEPLANE_JOIN_TOKEN"] = asyncio.run(_join_token(settings))
    node_log = settings.state_dir / "node.log"
    path.procs.append(
        subprocess.Popen(args, env=daemon_env, stdout=node_log.open("ab"), stderr=subprocess.STDOUT)
    )
    path.lines.append(f"local node daemon: node {LOCAL} (state {node_dir}; log {node_log})")
    return path
