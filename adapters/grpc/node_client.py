"""The node daemon's end of the control channel: enrollment, the credential file, and one
outbound TLS stream kept open with reconnects.

The credential lives in ``<state dir>/credential`` (0600, written atomically), a directory no
workload mounts. Messages are numbered on the stream under one lock, so the numbers on the wire
always increase (the gateway refuses any that does not). Losing the stream stops nothing: the
agent keeps watching and journalling, and the next stream's Hello carries the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from adapters.grpc import node_codec as codec
from application.node_agent import NodeAgent
from domain.errors import InvalidInput, Unauthenticated, Unavailable
from domain.node_messages import (
    CredentialAck,
    Heartbeat,
    HeartbeatAck,
    PrepareOrder,
    Refused,
    Rotation,
    ScanOutputs,
    SourceChunk,
    TokenRenewal,
    Welcome,
)
from domain.node_protocol import Command, NodeCapacity
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlStub

log = logging.getLogger("tuneplane.node")

CREDENTIAL_FILE = "credential"


@dataclass(frozen=True, slots=True)
class StoredCredential:
    node: str
    pool: str
    credential: str
    credential_id: str


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def load_credential(state_dir: Path) -> StoredCredential | None:
    path = state_dir / CREDENTIAL_FILE
    try:
        raw = json.loads(path.read_text())
        return StoredCredential(raw["node"], raw["pool"], raw["credential"], raw["credential_id"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"the node credential file {path} is unreadable: {exc}",
            fix="enroll the node again with a new join token (`tp node token create`)",
        ) from None


def save_credential(state_dir: Path, stored: StoredCredential) -> None:
    data = {
        "node": stored.node,
        "pool": stored.pool,
        "credential": stored.credential,
        "credential_id": stored.credential_id,
    }
    write_private(state_dir / CREDENTIAL_FILE, json.dumps(data) + "\n")


def _grpc_error(exc: GRPCError, what: str) -> Exception:
    text = f"{what}: {exc.message or exc.status.name}"
    if exc.status is Status.UNAUTHENTICATED:
        return Unauthenticated(text, fix="create a new join token: `tp node token create`")
    if exc.status in (Status.INVALID_ARGUMENT, Status.NOT_FOUND, Status.FAILED_PRECONDITION):
        return InvalidInput(text)
    return Unavailable(text)


class NodeLink:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        tls: ssl.SSLContext,
        state_dir: Path,
        agent: NodeAgent,
        capacity: NodeCapacity,
        address: str,
        version: str,
        watch_seconds: float = 1.0,
        connect_timeout: float = 30.0,
    ) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.state_dir = state_dir
        self.agent = agent
        self.capacity = capacity
        self.address = address
        self.version = version
        self.watch_seconds = watch_seconds
        self.connect_timeout = connect_timeout
        self._stream: Any = None
        self._seq = 0
        self._lock = asyncio.Lock()
        self.connected = asyncio.Event()
        self.heartbeat_rtts: list[float] = []

    def _channel(self) -> Channel:
        return Channel(self.host, self.port, ssl=self.tls)

    async def enroll(self, join_token: str, name: str) -> StoredCredential:
        channel = self._channel()
        try:
            request = pb.EnrollRequest(
                join_token=join_token,
                node_name=name,
                capacity=codec.capacity_to(self.capacity),
                address=self.address,
            )
            reply = await NodeControlStub(channel).Enroll(request, timeout=30)
        except GRPCError as exc:
            raise _grpc_error(exc, "enrollment refused") from None
        except (OSError, ssl.SSLError) as exc:
            raise Unavailable(f"cannot reach the gateway {self.host}:{self.port}: {exc}") from None
        finally:
            channel.close()
        stored = StoredCredential(
            reply.node_name, reply.pool, reply.credential, reply.credential_id
        )
        save_credential(self.state_dir, stored)
        return stored

    async def send(self, body: Any) -> None:
        stream = self._stream
        if stream is None:
            raise ConnectionError("not connected")
        async with self._lock:
            self._seq += 1
            await stream.send_message(codec.node_message_to(self._seq, body))

    async def run(self, retry_max: float = 10.0) -> None:
        """Keep a stream open (reconnecting with backoff) and watch members, until cancelled."""
        watcher = asyncio.create_task(self._watch())
        delay = 0.2
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.session()
                except Unauthenticated:
                    raise
                except (
                    GRPCError,
                    OSError,
                    ssl.SSLError,
                    Unavailable,
                    ConnectionError,
                    TimeoutError,
                    StreamTerminatedError,
                ) as exc:
                    log.warning("control stream to %s:%d ended: %s", self.host, self.port, exc)
                if time.monotonic() - started > 30:
                    delay = 0.2  # it was up a while: reconnect promptly
                await asyncio.sleep(delay)
                delay = min(delay * 2, retry_max)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def session(self) -> None:
        """One control stream, from Hello to its end."""
        stored = load_credential(self.state_dir)
        if stored is None:
            raise Unauthenticated(
                f"node is not enrolled (no {self.state_dir / CREDENTIAL_FILE})",
                fix="start it once with --join-token TOKEN (`tp node token create`)",
            )
        channel = self._channel()
        metadata = {"authorization": f"Bearer {stored.credential}"}
        try:
            async with NodeControlStub(channel).Connect.open(metadata=metadata) as stream:
                self._seq = 0
                self._stream = stream
                hello = await self.agent.hello(self.capacity, self.address, self.version)
                try:
                    await asyncio.wait_for(self.send(hello), self.connect_timeout)
                    await self._receive(stream, stored)
                finally:
                    self._stream = None
                    self.connected.clear()
        except GRPCError as exc:
            raise _grpc_error(exc, "the gateway closed the control stream") from None
        finally:
            channel.close()

    async def _receive(self, stream: Any, stored: StoredCredential) -> None:
        beats: asyncio.Task[None] | None = None
        last = 0
        silence = self.connect_timeout  # until Welcome; then three heartbeat intervals
        try:
            while True:
                try:
                    message = await asyncio.wait_for(stream.recv_message(), silence)
                except TimeoutError:
                    raise ConnectionError(f"the gateway was silent for {silence:.0f} s") from None
                if message is None:
                    return
                seq, body, grace = codec.gateway_message_from(message)
                if seq <= last:  # a replayed or reordered message: obey nothing twice
                    self.agent.refused += 1
                    log.warning("refused gateway message %d (last was %d)", seq, last)
                    continue
                last = seq
                if isinstance(body, Welcome):
                    await self.agent.welcomed(body.epoch, body.installation)
                    self.connected.set()
                    silence = 3 * max(body.heartbeat_seconds, 1)
                    if beats is None:
                        beats = asyncio.create_task(self._beat(max(body.heartbeat_seconds, 1)))
                elif isinstance(body, HeartbeatAck):
                    now = int(time.time() * 1000)
                    self.heartbeat_rtts.append((now - body.sent_unix_ms) / 1000)
                    del self.heartbeat_rtts[:-1000]
                elif isinstance(body, SourceChunk):
                    await self.agent.on_source(body)
                elif isinstance(body, PrepareOrder):
                    await self.agent.on_prepare(body)
                elif isinstance(body, Command):
                    await self.agent.on_command(body, grace)
                elif isinstance(body, Rotation):
                    stored = await self._rotate(stored, body)
                elif isinstance(body, ScanOutputs):
                    self.agent.start_scan(body)
                elif isinstance(body, TokenRenewal):
                    await self.agent.on_token(body)
                elif isinstance(body, Refused):
                    log.warning("the gateway refused message %d: %s", body.seq, body.reason)
        finally:
            if beats is not None:
                beats.cancel()

    async def _rotate(self, stored: StoredCredential, rotation: Rotation) -> StoredCredential:
        new = StoredCredential(
            stored.node, stored.pool, rotation.credential, rotation.credential_id
        )
        await asyncio.to_thread(save_credential, self.state_dir, new)  # durable before the ack
        await self.send(CredentialAck(rotation.credential_id))
        log.info("control credential rotated to %s", rotation.credential_id)
        return new

    async def _beat(self, seconds: int) -> None:
        while True:
            await self.send(Heartbeat(int(time.time() * 1000)))
            await asyncio.sleep(seconds)

    async def _watch(self) -> None:
        while True:
            try:
                await self.agent.watch_once()
            except Exception:
                log.exception("watching members failed")
            await asyncio.sleep(self.watch_seconds)
