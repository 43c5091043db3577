"""The node daemon's end of the control channel: enrollment, the credential file, and one
outbound TLS stream kept open with reconnects.

The credential lives in ``<state dir>/credential`` (0600, written atomically), a directory no
workload mounts. Messages are numbered on the stream under one lock, so the numbers on the wire
always increase (the gateway refuses any that does not). Losing the stream stops nothing: the
agent keeps watching and journalling, and the next stream's Hello carries the journal.

Reconnects: whatever ends a stream — the gateway ending or refusing it (any gRPC status but
UNAUTHENTICATED), a reset, TLS or HTTP/2 errors, a truncated or unreadable message — is logged
in one line and the daemon connects again, after an exponential back-off with jitter (0.2 s
doubling up to ``retry_max``), reset once a stream lasted ``healthy_after``. Only a credential
the gateway refuses (UNAUTHENTICATED: unknown, or replaced and past its grace period) or an
unreadable credential file ends ``run``: the node needs a new join token. Each daemon process
sends a random ``instance`` id with its streams, so that the gateway can tell its own
reconnect from a second daemon using a copy of the credential (docs/node-backend.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from h2.exceptions import H2Error
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from adapters.grpc import node_codec as codec
from adapters.grpc.codec_pieces import capacity_to
from adapters.grpc.errors import from_grpc
from application import instruments as i
from application.instruments import NO_INSTRUMENTS, Instruments
from application.node_agent import NodeAgent
from application.node_agent_base import tidy
from domain.errors import InvalidInput, TunePlaneError, Unauthenticated, Unavailable
from domain.node_messages import (
    CredentialAck,
    FetchOutput,
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
# what ends a stream without anything being wrong with this daemon: logged in one line
_TRANSPORT = (
    OSError,  # resets, refused connections, TLS errors, timeouts
    EOFError,
    GRPCError,
    ProtocolError,
    StreamTerminatedError,
    H2Error,
    TunePlaneError,
)


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
    """The stored credential (None: not enrolled). InvalidInput, naming the file and never
    showing the secret, when it cannot be used: unreadable, not the JSON the daemon writes, a
    field that is not text, or a credential that cannot go in a header (a control character:
    grpclib's error would print the whole header, the secret with it)."""
    path = state_dir / CREDENTIAL_FILE
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"it holds a JSON {type(raw).__name__}, not an object")
        fields = ("node", "pool", "credential", "credential_id")
        values = [raw[k] for k in fields]
    except FileNotFoundError:
        return None
    except KeyError as exc:
        raise _unusable(path, f"it has no field {exc}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise _unusable(path, f"it is unreadable ({type(exc).__name__}: {exc})") from None
    for name, value in zip(fields, values, strict=True):
        if not isinstance(value, str) or not value:
            raise _unusable(path, f"its field {name!r} is not a non-empty text")
        if not all("!" <= c <= "~" for c in value):  # visible ASCII, as the gateway makes them
            if name == "credential":  # the secret itself is never shown
                raise _unusable(path, "its credential holds a character a token cannot hold")
            raise _unusable(path, f"its field {name!r} ({value[:60]!r}) holds a character "
                            "a token cannot hold")  # fmt: skip
    return StoredCredential(*values)


def _unusable(path: Path, why: str) -> InvalidInput:
    return InvalidInput(
        f"the node credential file {path} cannot be used: {why}",
        fix=f"restore the file from a backup, or enroll the node again: create a join token "
        f"(`tp node token create`), delete {path} and start the daemon with --join-token",
    )


def save_credential(state_dir: Path, stored: StoredCredential) -> None:
    data = {
        "node": stored.node,
        "pool": stored.pool,
        "credential": stored.credential,
        "credential_id": stored.credential_id,
    }
    write_private(state_dir / CREDENTIAL_FILE, json.dumps(data) + "\n")


def _grpc_error(exc: GRPCError, what: str) -> TunePlaneError:
    fix = "create a new join token: `tp node token create`"
    return from_grpc(exc, what, fix if exc.status is Status.UNAUTHENTICATED else "")


class _Healthy(Exception):
    """A stream that had lasted ``healthy_after`` ended (its cause says why)."""


class Refusal(InvalidInput):
    """The daemon cannot go on with this gateway, and another stream would not change that:
    the gateway is another installation's, or the journal belongs to another engine. It
    ends ``run`` (the daemon exits 1 with the message and the fix), never a reconnect loop."""


def _refusal(exc: InvalidInput) -> Refusal:
    return Refusal(exc.message, fix=exc.fix, field=exc.field)


def _retried(exc: BaseException) -> bool:
    """Everything but a refused credential, a refusal of this daemon's own (and cancellation)
    is worth another stream."""
    return isinstance(exc, Exception) and not isinstance(exc, Unauthenticated | Refusal | _Healthy)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TunePlaneError):
        return str(exc)
    if isinstance(exc, GRPCError):
        return f"gRPC status {exc.status.name}: {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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
        retry_max: float = 10.0,
        healthy_after: float = 30.0,
        instruments: Instruments = NO_INSTRUMENTS,
    ) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.instruments = instruments
        self.state_dir = state_dir
        self.agent = agent
        self.capacity = capacity
        self.address = address
        self.version = version
        self.watch_seconds = watch_seconds
        self.connect_timeout = connect_timeout
        self.retry_max = retry_max
        self.healthy_after = healthy_after
        self.instance = secrets.token_hex(16)  # this process's streams (see the module doc)
        self._last_end, self._last_logged, self._repeats = "", 0.0, 0
        self._welcomed = False  # the current stream got its Welcome
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
                capacity=capacity_to(self.capacity),
                address=self.address,
            )
            reply = await NodeControlStub(channel).Enroll(request, timeout=30)
        except GRPCError as exc:
            raise _grpc_error(exc, "enrollment refused") from None
        except (OSError, ssl.SSLError) as exc:
            raise Unavailable(
                f"cannot reach the gateway {self.host}:{self.port}: {exc}",
                fix="check --server (the node gateway's HOST:PORT) and that the gateway runs",
            ) from None
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
        message = tidy(body)  # every reason bounded and cleaned: one bad text gets it refused
        async with self._lock:
            self._seq += 1
            await stream.send_message(codec.node_message_to(self._seq, message))

    async def run(self) -> None:
        """Keep a stream open (reconnecting with back-off) and watch members, until cancelled.
        Raises Unauthenticated when the credential is refused for good."""
        watcher = asyncio.create_task(self._watch())
        try:
            while True:
                try:
                    async for attempt in AsyncRetrying(
                        retry=retry_if_exception(_retried),
                        # 0.2 s doubling up to retry_max, plus up to 0.2 s of jitter
                        wait=wait_exponential(multiplier=0.2, max=self.retry_max)
                        + wait_random(0, 0.2),
                        before_sleep=self._ended,
                        reraise=True,
                    ):
                        with attempt:
                            await self._stream_once()
                except _Healthy as healthy:  # it was up a while: reconnect now, back-off reset
                    self._log_end(healthy.__cause__ or healthy, 0.0)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _stream_once(self) -> None:
        """One stream; always ends with an exception: why it ended (``_Healthy`` around it
        when the stream had lasted ``healthy_after``)."""
        started = time.monotonic()
        try:
            await self.session()
            raise Unavailable("the gateway ended the control stream")
        except Exception as exc:
            if _retried(exc) and time.monotonic() - started >= self.healthy_after:
                raise _Healthy() from exc
            raise

    def _ended(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None:
            self._log_end(exc, state.upcoming_sleep)

    def _log_end(self, exc: BaseException, delay: float) -> None:
        """One line per end; the same reason again is logged at most once a minute (with how
        many times it came meanwhile). An error of an unexpected kind gets its traceback once."""
        why = _describe(exc)
        now = time.monotonic()
        if why == self._last_end and now - self._last_logged < 60:
            self._repeats += 1
            log.debug("control stream ended again: %s", why)
            return
        again = f" (and {self._repeats} more times)" if why == self._last_end else ""
        log.warning(
            "control stream to %s:%d ended: %s%s; reconnecting in %.1f s",
            self.host, self.port, why, again, delay,
        )  # fmt: skip
        if not isinstance(exc, _TRANSPORT) and why != self._last_end:
            log.warning("the unexpected error above", exc_info=exc)
        self._last_end, self._last_logged, self._repeats = why, now, 0

    async def session(self) -> None:
        """One control stream, from Hello to its end."""
        try:
            stored = load_credential(self.state_dir)
        except InvalidInput as exc:  # an unreadable credential does not heal by itself
            raise Unauthenticated(exc.message, fix=exc.fix) from None
        if stored is None:
            raise Unauthenticated(
                f"node is not enrolled (no {self.state_dir / CREDENTIAL_FILE})",
                fix="start it once with --join-token TOKEN (`tp node token create`)",
            )
        channel = self._channel()
        metadata = {
            "authorization": f"Bearer {stored.credential}",
            codec.INSTANCE_HEADER: self.instance,
        }
        try:
            self._welcomed = False
            async with NodeControlStub(channel).Connect.open(metadata=metadata) as stream:
                self._seq = 0
                self._stream = stream
                try:
                    hello = await self.agent.hello(self.capacity, self.address, self.version)
                except InvalidInput as exc:  # its journal is another engine's: for good
                    raise _refusal(exc) from None
                try:
                    await asyncio.wait_for(self.send(hello), self.connect_timeout)
                    await self._receive(stream, stored)
                finally:
                    self._stream = None
                    self.connected.clear()
                await stream.end()  # the gateway ended it: end ours, so its status is read
        except GRPCError as exc:
            what = "ended" if self._welcomed else "refused"
            if exc.status is Status.UNAUTHENTICATED:
                raise Unauthenticated(
                    f"the gateway refused this node's credential: {exc.message}",
                    fix=f"enroll node {stored.node} again: create a join token (`tp node token "
                    f"create --pool {stored.pool} --name {stored.node}`), delete "
                    f"{self.state_dir / CREDENTIAL_FILE} and start the daemon with --join-token",
                ) from None
            raise _grpc_error(exc, f"the gateway {what} the control stream") from None
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
                except AssertionError as exc:  # grpclib's check of a message's length
                    raise ConnectionError(f"the gateway sent a truncated message: {exc}") from None
                if message is None:
                    return
                seq, body, grace = codec.gateway_message_from(message)
                if seq <= last:  # a replayed or reordered message: obey nothing twice
                    self.agent.refused += 1
                    log.warning("refused gateway message %d (last was %d)", seq, last)
                    continue
                last = seq
                if isinstance(body, Welcome):
                    self._welcomed = True
                    try:
                        await self.agent.welcomed(body.epoch, body.installation)
                    except InvalidInput as exc:  # another installation's gateway: for good
                        raise _refusal(exc) from None
                    self.connected.set()
                    silence = 3 * max(body.heartbeat_seconds, 1)
                    if beats is None:
                        beats = asyncio.create_task(self._beat(max(body.heartbeat_seconds, 1)))
                elif isinstance(body, HeartbeatAck):
                    now = int(time.time() * 1000)
                    self.heartbeat_rtts.append((now - body.sent_unix_ms) / 1000)
                    self.instruments.observe(
                        i.HEARTBEAT_RTT_SECONDS, max(0.0, (now - body.sent_unix_ms) / 1000)
                    )
                    del self.heartbeat_rtts[:-1000]
                elif isinstance(body, SourceChunk):
                    await self.agent.on_source(body)
                elif isinstance(body, PrepareOrder):
                    await self.agent.on_prepare(body)
                elif isinstance(body, Command):
                    await self.agent.on_command(body, grace)
                elif isinstance(body, Rotation):
                    try:
                        stored = await self._rotate(stored, body)
                    except OSError as exc:  # not acknowledged: the gateway sends it again
                        log.error("the new control credential cannot be stored: %s", exc)
                elif isinstance(body, ScanOutputs | FetchOutput):
                    self.agent.start_scan(body)
                elif isinstance(body, TokenRenewal):
                    try:
                        await self.agent.on_token(body)
                    except Unavailable as exc:  # the journal cannot be written: held, the
                        # gateway renews again while the member reports the old expiry
                        log.error("collector token of %s not kept: %s", body.ref.member_id, exc)
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
