"""The node gateway's stream handling over real gRPC and TLS on loopback, two gateway
processes' worth of ``NodeGateway`` sharing one database: one session per node across them, a
replaced stream ended with ABORTED (by its own gateway, or by the other one at its next
heartbeat flush), and a stream whose reader fails is closed instead of hanging."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import StreamTerminatedError
from grpclib.server import Server

from adapters.grpc import node_codec as codec
from adapters.grpc.node_codec import INSTANCE_HEADER
from adapters.grpc.node_gateway import NodeGateway
from adapters.tls import client_context, ensure_dev_pki, server_context
from application import enrollment
from application.context import Context
from application.node_control import NodeControl
from domain.fleet import Pool
from domain.node_messages import Heartbeat, Hello, Welcome
from domain.node_protocol import NodeCapacity
from proto.node_control_grpc import NodeControlStub
from tests.fixtures.server import free_port
from tests.support.context import ADMIN, memory_context

pytestmark = pytest.mark.integration

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
CAP = NodeCapacity(0, None, 1.0, 1024)


class RawCodec(ProtoCodec):
    """Sends bytes as they are: what a broken or hostile peer puts on the wire."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        return message if isinstance(message, bytes) else super().encode(message, message_type)


@dataclass
class Rig:
    ctx: Context
    credential: str
    ca: Path
    ports: list[int] = field(default_factory=list)
    gateways: list[NodeGateway] = field(default_factory=list)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def stream(self, gateway: int, instance: str = "") -> Any:
        """A Connect stream to gateway ``gateway`` that said Hello and got its Welcome."""
        channel = Channel("127.0.0.1", self.ports[gateway], ssl=client_context(self.ca))
        channel._codec = RawCodec()  # grpclib has no public setter
        self.stack.callback(channel.close)
        metadata = {"authorization": f"Bearer {self.credential}"}
        if instance:
            metadata[INSTANCE_HEADER] = instance
        stream = NodeControlStub(channel).Connect.open(metadata=metadata)
        await stream.__aenter__()
        try:
            hello = Hello("n1", CAP, "10.0.0.1", "t", 0, ())
            await stream.send_message(codec.node_message_to(1, hello))
            reply = await stream.recv_message()
            assert reply is not None, "the stream ended before the welcome"
            _, welcome, _ = codec.gateway_message_from(reply)
        except Exception as exc:  # as ``async with`` would: a reset stream raises its status
            await stream.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self.stack.push_async_callback(_forget, stream)
        assert isinstance(welcome, Welcome)
        return stream

    async def link_closed(self) -> bool:
        async with self.ctx.uow() as uow:
            link = await uow.links.get("n1")
        return link is not None and link.closed_at is not None


async def _forget(stream: Any) -> None:
    with contextlib.suppress(Exception):
        await stream.cancel()
    with contextlib.suppress(Exception):
        await stream.__aexit__(None, None, None)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    ctx = memory_context(tmp_path, pools=(POOL,), nodes=0)
    secret, _ = await enrollment.create_join_token(ctx, ADMIN, POOL.name, "n1")
    done = await enrollment.enroll(ctx, secret, "n1", CAP, "10.0.0.1")
    pki = ensure_dev_pki(tmp_path, ["127.0.0.1"])
    rig = Rig(ctx, done.credential, pki.ca.cert)
    tasks = []
    for i in range(2):
        gateway = NodeGateway(NodeControl(ctx, f"gw{i}"), poll=0.05)
        server = Server([gateway])
        port = free_port()
        await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
        rig.gateways.append(gateway)
        rig.ports.append(port)
        tasks.append(asyncio.create_task(gateway.run()))
        rig.stack.push_async_callback(server.wait_closed)
        rig.stack.callback(server.close)
    try:
        yield rig
    finally:
        await rig.stack.aclose()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def ending(stream: Any) -> Status:
    """Read until the gateway ends the stream; its status (OK for a plain end)."""
    try:
        try:
            while await asyncio.wait_for(stream.recv_message(), 10) is not None:
                pass
            await stream.end()
            await stream.recv_trailing_metadata()
        except StreamTerminatedError as exc:  # the status came with a reset: as ``async with``
            await stream.__aexit__(type(exc), exc, exc.__traceback__)
            raise
    except GRPCError as exc:
        return exc.status
    return Status.OK


async def test_an_unreadable_message_ends_the_stream_and_its_session(rig: Rig) -> None:
    stream = await rig.stream(0)
    await stream.send_message(b"\xff\xff\xff\xff")  # no protobuf message
    with contextlib.suppress(Exception):  # however grpclib reports it: the stream ends
        await ending(stream)
    for _ in range(200):
        if await rig.link_closed():
            break
        await asyncio.sleep(0.05)
    assert await rig.link_closed()
    assert "n1" not in rig.gateways[0].links


async def test_a_second_session_is_refused_through_another_gateway(rig: Rig) -> None:
    first = await rig.stream(0, "a" * 32)
    with pytest.raises(GRPCError) as refused:
        await rig.stream(1, "b" * 32)
    assert refused.value.status is Status.FAILED_PRECONDITION
    assert "already has a live control session" in (refused.value.message or "")
    await first.send_message(codec.node_message_to(2, Heartbeat(0)))
    assert (await first.recv_message()).WhichOneof("body") == "heartbeat_ack"  # unharmed
    async with rig.ctx.uow() as uow:
        [event] = await uow.node_events.of_node("n1", 10)
    assert event.source == "127.0.0.1"


@pytest.mark.parametrize("other", [0, 1], ids=["same gateway", "another gateway"])
async def test_the_same_daemon_replaces_its_session_and_the_old_stream_ends(
    rig: Rig, other: int
) -> None:
    old = await rig.stream(0, "a" * 32)
    new = await rig.stream(other, "a" * 32)  # it gave the old stream up: at once
    await old.send_message(codec.node_message_to(2, Heartbeat(0)))  # the old gateway flushes it
    assert await ending(old) is Status.ABORTED
    if other:  # the old gateway no longer sends commands through the old stream
        assert "n1" not in rig.gateways[0].links
    await new.send_message(codec.node_message_to(2, Heartbeat(0)))
    assert (await new.recv_message()).WhichOneof("body") == "heartbeat_ack"
    assert not await rig.link_closed()


async def test_a_lost_stream_ends_the_session_even_if_its_handler_is_cancelled_again(
    rig: Rig,
) -> None:
    """The stream drops while the gateway cannot record the session's end yet (its writes
    held), and the stream's handler is cancelled again meanwhile (as grpclib does at shutdown):
    the end is still recorded once the writes go on. It used to be cut short, and the node stayed
    "connected" until the control plane's heartbeat timeout, refusing its daemon's next session
    as a second one."""
    gateway = rig.gateways[0]
    stream = await rig.stream(0)
    handlers = {t for t in asyncio.all_tasks() if "request_handler" in repr(t.get_coro())}
    async with gateway.control._writing:  # the session's end cannot be written yet
        await stream.cancel()  # the stream is reset: grpclib cancels the handler
        for _ in range(200):
            if "n1" not in gateway.links:  # the handler is in its clean-up
                break
            await asyncio.sleep(0.01)
        assert "n1" not in gateway.links
        for task in handlers:
            task.cancel()  # and again
        await asyncio.sleep(0.05)
        assert not await rig.link_closed()
    await asyncio.wait_for(gateway.closing(), 10)
    assert await rig.link_closed()
