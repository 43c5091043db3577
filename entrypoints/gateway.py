"""`tp gateway node`: the node control gateway process (gRPC over TLS, writing to PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
from datetime import timedelta
from pathlib import Path

from grpclib.server import Server

from adapters.grpc.node_gateway import NodeGateway
from adapters.tls import ensure_dev_pki, server_context
from application.context import Context
from application.node_control import ControlSettings, NodeControl
from domain.errors import TunePlaneError
from domain.ports import NODE_WORK
from entrypoints.container import Container
from entrypoints.server import run_server
from entrypoints.settings import Settings

log = logging.getLogger("tuneplane.gateway")


def gateway_names(settings: Settings) -> list[str]:
    """Names the dev certificate covers: loopback, this host, and the listen address."""
    names = ["localhost", "127.0.0.1", socket.gethostname()]
    host = settings.node_gateway_host
    if host not in ("0.0.0.0", "::", "") and host not in names:
        names.append(host)
    return names


def gateway_tls(settings: Settings) -> tuple[ssl.SSLContext, Path]:
    """The server TLS context and the CA file nodes must trust. The operator's certificate
    (TUNEPLANE_GATEWAY_CERT/_KEY, TUNEPLANE_CA_FILE) or else the dev PKI in the state dir."""
    if settings.gateway_cert and settings.gateway_key:
        ca = settings.ca_file or settings.gateway_cert
        return server_context(settings.gateway_cert, settings.gateway_key), ca
    pki = ensure_dev_pki(settings.state_dir, gateway_names(settings))
    return server_context(pki.server.cert, pki.server.key), pki.ca.cert


def control_settings(settings: Settings) -> ControlSettings:
    return ControlSettings(
        heartbeat=timedelta(seconds=settings.heartbeat_seconds),
        rotate_every=timedelta(seconds=settings.credential_rotate_seconds),
        rotation_grace=timedelta(seconds=settings.credential_grace_seconds),
    )


async def serve_node_gateway(settings: Settings, announce: str = "") -> None:
    tls, ca = gateway_tls(settings)
    container = Container(settings=settings)
    await container.init_resources()  # type: ignore[misc]
    server: Server | None = None
    try:
        ctx: Context = await container.context()  # type: ignore[misc]
        name = f"{socket.gethostname()}:{os.getpid()}"
        gateway = NodeGateway(NodeControl(ctx, name, control_settings(settings)))
        ctx.signals.subscribe(NODE_WORK, gateway.wake)  # a launch began or was decided
        server = Server([gateway])
        await server.start(settings.node_gateway_host, settings.node_gateway_port, ssl=tls)
        print(
            announce
            or f"node gateway on {settings.node_gateway_host}:{settings.node_gateway_port} "
            f"(TLS; nodes trust {ca})",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop_task = asyncio.create_task(gateway.run())
        await stop.wait()
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
    finally:
        if server is not None:
            server.close()
            await server.wait_closed()
        await container.shutdown_resources()  # type: ignore[misc]


def run_node_gateway(host: str | None, port: int | None) -> int:
    import dataclasses

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = Settings()
    changes: dict[str, object] = {}
    if host is not None:
        changes["node_gateway_host"] = host
    if port is not None:
        changes["node_gateway_port"] = port
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    try:
        run_server(serve_node_gateway(settings))
    except TunePlaneError as exc:
        print(f"error: {exc}" + (f"\nfix: {exc.fix}" if exc.fix else ""), flush=True)
        return 1
    return 0
