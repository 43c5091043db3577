"""The gateway processes, gRPC over TLS writing to PostgreSQL: `tp gateway node` (node control)
and `tp gateway telemetry` (metrics from collectors). Separate processes, ports, credentials."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from pathlib import Path

from grpclib.server import Server

from adapters.observability.prometheus import process_instruments
from adapters.tls import dev_server_context, server_context
from domain.coordination_ports import NODE_WORK
from domain.errors import Unavailable
from entrypoints import logs
from entrypoints.containers.database import reach_database
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.gateway_run import where
from entrypoints.gc_pauses import keep_pauses_short, pace_collections, stop_policy
from entrypoints.loop_watch import unwatch_collections, watch_collections, watch_loop
from entrypoints.process import announce_ready, check_listen, until_signalled
from entrypoints.settings import Settings

log = logging.getLogger("tuneplane.gateway")


def gateway_names(settings: Settings) -> list[str]:
    """Names the dev certificate covers: loopback, this host, and both gateways' addresses."""
    names = ["localhost", "127.0.0.1", socket.gethostname()]
    for host in (settings.node_gateway_host, settings.telemetry_gateway_host):
        if host not in ("0.0.0.0", "::", "") and host not in names:
            names.append(host)
    return names


def gateway_tls(settings: Settings) -> tuple[ssl.SSLContext, Path]:
    """The server TLS context and the CA file nodes must trust. The operator's certificate
    (TUNEPLANE_GATEWAY_CERT/_KEY, TUNEPLANE_CA_FILE) or else the dev PKI in the state dir."""
    if settings.gateway_cert and settings.gateway_key:
        ca = settings.ca_file or settings.gateway_cert
        return server_context(settings.gateway_cert, settings.gateway_key), ca
    return dev_server_context(settings.state_dir, gateway_names(settings))


BACKLOG = 4096  # connections not yet accepted: thousands of nodes reconnect at once


async def _listen(
    grpc: Server, host: str, port: int, tls: ssl.SSLContext, which: str, *, share: bool = False
) -> Server:
    """Start ``grpc`` on host:port (``share``: beside other processes that share it, with
    SO_REUSEPORT); a clear error when it cannot listen there."""
    try:
        await grpc.start(host, port, ssl=tls, backlog=BACKLOG, reuse_port=share or None)
    except OSError as exc:
        raise Unavailable(
            f"the {which} gateway cannot listen on {host}:{port}: {exc.strerror or exc}",
            fix=f"stop what uses the port, or give another address ({where(which)})",
        ) from None
    return grpc


async def serve_node_gateway(settings: Settings, announce: str = "") -> None:
    # each gateway's container is imported by its own command: the node gateway's control
    # plane (SQLAlchemy) is not the telemetry gateway's start-up, nor the reverse
    from entrypoints.containers.node_gateway import NodeGatewayContainer

    check_listen(settings.node_gateway_host, settings.node_gateway_port, where("node"))
    await reach_database(settings)
    tls, ca = gateway_tls(settings)
    async with started(NodeGatewayContainer(settings=settings)) as container:
        ctx = await resolve(container.context)
        gateway = await resolve(container.gateway)
        ctx.signals.subscribe(NODE_WORK, gateway.wake)  # a launch began or was decided
        # thousands of streams' state: full collections walk only what is new (gc_pauses.py)
        pauses = keep_pauses_short(asyncio.get_running_loop().call_soon_threadsafe)
        measure = process_instruments()  # the loop's lag, the collector's pauses (loop_watch.py)
        collections = watch_collections(measure)
        lag = asyncio.create_task(watch_loop(measure))
        paced = asyncio.create_task(pace_collections(pauses))  # young ones on a clock
        server = await _listen(
            Server([gateway]),
            settings.node_gateway_host,
            settings.node_gateway_port,
            tls,
            "node",
            share=settings.node_gateway_share_port,
        )
        try:
            logs.say(
                announce
                or f"node gateway on {settings.node_gateway_host}:{settings.node_gateway_port} "
                f"(TLS; nodes trust {ca})"
            )
            announce_ready()
            await until_signalled(gateway.run())
        finally:
            server.close()
            await server.wait_closed()
            await gateway.closing()  # every stream's session recorded as ended
            for task in (lag, paced):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            unwatch_collections(collections)
            stop_policy(pauses)


async def serve_telemetry_gateway(settings: Settings, announce: str = "") -> None:
    """`tp gateway telemetry`: its own process, port and credentials; PostgreSQL only."""
    from adapters.postgres.metric_compaction import keep_compacting
    from entrypoints.containers.telemetry_gateway import TelemetryGatewayContainer

    host, port = settings.telemetry_gateway_host, settings.telemetry_gateway_port
    check_listen(host, port, where("telemetry"))
    await reach_database(settings)
    tls, ca = gateway_tls(settings)
    async with started(TelemetryGatewayContainer(settings=settings)) as container:
        gateway = await resolve(container.gateway)
        # thousands of streams' HTTP/2 and TLS state: as the node gateway (gc_pauses.py)
        pauses = keep_pauses_short(asyncio.get_running_loop().call_soon_threadsafe)
        share = settings.telemetry_gateway_share_port
        server = await _listen(Server([gateway]), host, port, tls, "telemetry", share=share)
        try:
            logs.say(announce or f"telemetry gateway on {host}:{port} (TLS; collectors trust {ca})")
            announce_ready()
            every = settings.telemetry_compact_seconds
            pool = await resolve(container.pool)
            # serve until told to stop, merging the small blocks of slow collectors meanwhile
            measure = process_instruments()
            await until_signalled(
                keep_compacting(pool, every, instruments=measure)
                if every
                else asyncio.Event().wait()
            )
        finally:
            server.close()
            await server.wait_closed()
            stop_policy(pauses)
