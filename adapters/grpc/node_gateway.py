"""The node control gateway's gRPC service (grpclib, served over TLS only).

One ``Connect`` stream per node daemon. A reader task checks and records what the node says
(``NodeControl.handle``); a writer task is the only one that sends on the stream, from an
outbox fed by the reader (heartbeat answers, refusals) and by the gateway's command loop, which
asks ``NodeControl.commands`` for every connected node at once, each ``poll`` seconds. A node
silent for three heartbeat intervals is cut off (TCP may not notice a vanished peer).

One session per node (``application/node_sessions.py``): a stream is opened only if the node
has no other live session, or the new one comes from the same daemon process (the
``tuneplane-daemon-instance`` metadata). A stream whose session was replaced — here, or through
another gateway (``NodeControl.superseded``, from the heartbeat flush) — is ended with ABORTED
and the reason, never left to carry commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from adapters.grpc import frame_repr
from adapters.grpc import node_codec as codec
from adapters.grpc.codec_pieces import capacity_from
from adapters.grpc.errors import MAX_MESSAGE, bearer, grpc_error
from adapters.grpc.node_checkpoint_service import CheckpointCalls
from adapters.grpc.node_codec import GatewayBody
from application import instruments as i
from application import log_context
from application.enrollment import NodeIdentity, authenticate_node, enroll
from application.node_commands import Outgoing
from application.node_control import NodeControl, Session
from application.node_sessions import Caller
from domain.errors import InvalidInput, NotFound, TunePlaneError
from domain.node_messages import (
    Heartbeat,
    HeartbeatAck,
    Hello,
    Refused,
    SourceChunk,
    Welcome,
)
from domain.texts import cut
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlBase

log = logging.getLogger("tuneplane.gateway")
frame_repr.install()  # h2 builds every received frame's repr for a log line (frame_repr.py)

SOURCE_CHUNK = 1024 * 1024
OPENING = 8  # streams authenticated and opened at once (the pool has 20 connections)
_GONE = object()


@dataclass(frozen=True)
class _Replaced:
    """Ends a stream whose session a newer one replaced, saying so."""

    why: str


def _caller(stream: Stream[pb.NodeMessage, pb.GatewayMessage]) -> Caller:
    peer = stream.peer.addr() if stream.peer is not None else None
    instance = stream.metadata.get(codec.INSTANCE_HEADER, "") if stream.metadata else ""
    if isinstance(instance, bytes) or len(instance) > 64 or not instance.isalnum():
        instance = ""  # not what a daemon sends: never taken for the same daemon
    return Caller(str(peer[0]) if peer else "", instance)


def _who(identity: NodeIdentity | None) -> str:
    return identity.node if identity is not None else "?"


@dataclass
class _Link:
    session: Session
    outbox: asyncio.Queue[GatewayBody | object] = field(default_factory=asyncio.Queue)
    seq: int = 0
    sources: set[str] = field(default_factory=set)


class _Live(Mapping[str, Session]):
    """The live sessions by node: a view of the gateway's links (no copy per pass)."""

    def __init__(self, links: dict[str, _Link]) -> None:
        self._links = links

    def __getitem__(self, node: str) -> Session:
        return self._links[node].session

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)

    def __len__(self) -> int:
        return len(self._links)


class NodeGateway(CheckpointCalls, NodeControlBase):
    def __init__(
        self,
        control: NodeControl,
        *,
        poll: float = 0.5,
        stop_grace: float = 10.0,
        opening: int = OPENING,
    ) -> None:
        self.control = control
        # streams being opened at once (a reconnect storm: every node of a dead gateway): each
        # takes pooled database connections for several transactions, and unbounded they
        # queued the heartbeats' flush behind thousands of them, past the 30 s after which the
        # control plane marks a node disconnected
        self._opening = asyncio.Semaphore(opening)
        self.ctx = control.ctx
        self.poll = poll
        self.stop_grace = stop_grace
        self.links: dict[str, _Link] = {}
        self._live = _Live(self.links)
        self._wake = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()  # sessions' ends being recorded

    # -- Enroll -----------------------------------------------------------------------------

    async def Enroll(self, stream: Stream[pb.EnrollRequest, pb.EnrollReply]) -> None:
        request = await stream.recv_message()
        assert request is not None
        try:
            done = await enroll(
                self.ctx,
                request.join_token,
                request.node_name,
                capacity_from(request.capacity),
                request.address,
            )
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        log.info("node %s enrolled into pool %s", done.node, done.pool)
        await stream.send_message(
            pb.EnrollReply(
                node_name=done.node,
                pool=done.pool,
                credential=done.credential,
                credential_id=done.credential_id,
            )
        )

    # -- Connect ----------------------------------------------------------------------------

    async def Connect(self, stream: Stream[pb.NodeMessage, pb.GatewayMessage]) -> None:
        identity: NodeIdentity | None = None
        try:
            async with self._opening:
                identity = await authenticate_node(self.ctx, bearer(stream.metadata))
            first = await stream.recv_message()
            if first is None:
                return
            seq, hello = codec.node_message_from(first)
            if not isinstance(hello, Hello):
                raise InvalidInput("the first message must be Hello", fix="upgrade the daemon")
            async with self._opening:
                session = await self.control.open(identity, hello, _caller(stream))
        except InvalidInput as exc:  # nothing was written: the daemon is told why, and the log
            log.warning("node %s: control stream refused: %s", _who(identity), str(exc)[:1000])
            raise grpc_error(exc) from None
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        session.last_seq = seq
        log_context.bind_rest_of_task(node=session.node)  # this stream's task, its reader's
        previous = self.links.pop(session.node, None)
        if previous is not None:  # the node reconnected before we noticed the old stream end
            previous.outbox.put_nowait(_Replaced(f"session {session.number} replaced it"))
        link = _Link(session)
        self.links[session.node] = link
        self.ctx.instruments.set(i.NODE_STREAMS, len(self.links))
        heartbeat = self.control.settings.heartbeat.total_seconds()
        now_ms = int(self.ctx.clock.now().timestamp() * 1000)
        link.outbox.put_nowait(Welcome(session.epoch, int(heartbeat), now_ms, session.installation))
        if session.rotation is not None:
            link.outbox.put_nowait(session.rotation)
        self._wake.set()
        reader = asyncio.create_task(self._read(stream, link, heartbeat * 3))
        try:
            ended = await self._write(stream, link)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            if self.links.get(session.node) is link:
                del self.links[session.node]
            self.ctx.instruments.set(i.NODE_STREAMS, len(self.links))
            await self._close(session)
        if isinstance(ended, _Replaced):
            log.info("node %s: session %d ended: %s", session.node, session.number, ended.why)
            raise GRPCError(
                Status.ABORTED, f"this control stream of node {session.node} ended: {ended.why}"
            )

    async def _close(self, session: Session) -> None:
        """Record the end of ``session`` even if this handler is cancelled again meanwhile
        (grpclib cancels the handler of a lost connection, and again at shutdown): the close
        runs as a task of its own, which the gateway's shutdown waits for (``closing``). Cut
        short, the node would stay "connected" until the control plane's heartbeat timeout, and
        its daemon's next session be refused as a second one until then."""
        task = asyncio.create_task(self.control.close(session))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        await asyncio.shield(task)

    async def closing(self) -> None:
        """Wait for the sessions being closed (at shutdown, after the server closed)."""
        if self._closing:
            await asyncio.wait(set(self._closing))

    async def _read(
        self, stream: Stream[pb.NodeMessage, pb.GatewayMessage], link: _Link, silence: float
    ) -> None:
        try:
            await self._read_until_end(stream, link, silence)
        finally:  # whatever ended it (a reset, an unreadable message): the writer ends too
            link.outbox.put_nowait(_GONE)

    async def _read_until_end(
        self, stream: Stream[pb.NodeMessage, pb.GatewayMessage], link: _Link, silence: float
    ) -> None:
        session = link.session
        while True:
            try:  # a timeout scope, not wait_for: no task per message (2,000 a second and more)
                async with asyncio.timeout(silence):
                    message = await stream.recv_message()
            except TimeoutError:
                log.warning("node %s silent for %.0f s: closing its stream", session.node, silence)
                return
            if message is None:
                return
            try:
                seq, body = codec.node_message_from(message)
            except InvalidInput as exc:  # that message only: the stream goes on
                session.refused += 1
                if session.refused <= 10 or math.log10(session.refused).is_integer():
                    log.warning(
                        "node %s: message %d refused (%d refused on this stream): %s",
                        session.node, message.seq, session.refused, str(exc)[:1000],
                    )  # fmt: skip
                link.outbox.put_nowait(Refused(message.seq, cut(str(exc), MAX_MESSAGE)))
                continue
            if isinstance(body, Heartbeat):
                if seq > session.last_seq:
                    session.last_seq = seq
                    self.control.heartbeat(session)
                    self.ctx.instruments.inc(i.NODE_HEARTBEATS)
                    link.outbox.put_nowait(HeartbeatAck(body.sent_unix_ms))
                continue
            if isinstance(body, Hello):
                link.outbox.put_nowait(Refused(seq, "Hello is only the first message"))
                continue
            why = await self.control.handle(session, seq, body)
            if why is not None:
                link.outbox.put_nowait(Refused(seq, why))
            else:
                self._wake.set()  # a vote or report may change what its members need

    async def _write(
        self, stream: Stream[pb.NodeMessage, pb.GatewayMessage], link: _Link
    ) -> _Replaced | None:
        """Send the outbox until the stream ends: returns why, when a newer session replaced it."""
        while True:
            item = await link.outbox.get()
            if item is _GONE:
                return None
            if isinstance(item, _Replaced):
                return item
            link.seq += 1
            body: GatewayBody = item  # type: ignore[assignment]
            await stream.send_message(codec.gateway_message_to(link.seq, body, self.stop_grace))

    # -- the command loop -------------------------------------------------------------------

    def wake(self) -> None:
        """Dispatch now instead of at the next poll (another process changed the ledger)."""
        self._wake.set()

    async def run(self) -> None:
        """Deliver commands to connected nodes and flush heartbeats, until cancelled."""
        while True:
            try:
                await self.dispatch()
                await self.rotate()
                await self.renew()
                await self.scan()
                await self.control.flush()
                self._cut_superseded()
            except Exception:
                log.exception("node gateway: dispatch failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)
            self._wake.clear()

    def _cut_superseded(self) -> None:
        """End the streams whose session another gateway replaced since."""
        superseded, self.control.superseded = self.control.superseded, set()
        for node, number in superseded:
            link = self.links.get(node)
            if link is not None and link.session.number == number:
                del self.links[node]  # no more commands through it
                link.outbox.put_nowait(_Replaced("a newer session of the node opened elsewhere"))

    async def rotate(self) -> int:
        """Send new credentials to nodes whose credential is due (checked in memory)."""
        return self._deliver(await self.control.rotations_due(self._live))

    async def renew(self) -> int:
        """Send newer collector tokens for the long runs of connected nodes."""
        return self._deliver(await self.control.renewals_due(self._live))

    async def scan(self) -> int:
        """Send the output scan requests due for connected nodes."""
        return self._deliver(await self.control.scans_due(self._live))

    def _deliver(self, due: Sequence[tuple[Session, GatewayBody]]) -> int:
        """Queue each message on its session's stream (unless that stream has been replaced)."""
        for session, message in due:
            link = self.links.get(session.node)
            if link is not None and link.session is session:
                link.outbox.put_nowait(message)
        return len(due)

    async def dispatch(self) -> int:
        """Queue the commands due (``NodeControl.commands_due``: only sessions that can need
        one are looked at)."""
        if not self.links:
            return 0
        todo = await self.control.commands_due(self._live)
        sent = 0
        for node, items in todo.items():
            link = self.links.get(node)
            if link is None:
                continue
            for item in items:
                async for body in self._bodies(link, item):
                    link.outbox.put_nowait(body)
                    sent += 1
        return sent

    async def _bodies(self, link: _Link, item: Outgoing) -> AsyncIterator[GatewayBody]:
        order = item.order
        if order is None:
            yield item.command
            return
        digest = order.source_digest
        if digest and digest not in link.sources:
            try:
                data = await self.ctx.blob_store().read(digest)
            except NotFound:
                await self.control.vote_for(order.ref, False, "its source archive is gone")
                return
            for offset in range(0, max(len(data), 1), SOURCE_CHUNK):
                chunk = data[offset : offset + SOURCE_CHUNK]
                yield SourceChunk(digest, offset, chunk, offset + SOURCE_CHUNK >= len(data))
            link.sources.add(digest)
        yield order
