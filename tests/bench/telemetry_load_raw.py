"""The load generator's collectors on a minimal HTTP/2 client written for it (``BENCH_CLIENT=raw``).

Only the load generator: the collectors ship with grpclib (``telemetry_client.py``). grpclib (and
``grpc.aio``, measured: no cheaper per batch here) cost the load generator about a quarter of the
benchmark's CPU at 2,000 streams, as much as PostgreSQL; two cores cannot hold the gateway, the
database and a pure Python HTTP/2 client playing 2,000 collectors. This client writes the frames
itself: a batch is its serialized ``Batch`` behind the gRPC prefix and a DATA frame header, one
``transport.write`` (TLS in C); the acks are read straight from the DATA frames.

It speaks enough HTTP/2 for one gRPC stream per connection: the preface and SETTINGS (acked),
HEADERS encoded by hpack, DATA both ways split at the peer's frame size and held back by its
flow-control windows (WINDOW_UPDATE, SETTINGS_INITIAL_WINDOW_SIZE), WINDOW_UPDATE for what it
received, PING answered. Any end of the stream (trailers, RST_STREAM, GOAWAY, the connection
lost) is a failure: ``Player.run`` reopens and resends what is unacknowledged, as with grpclib.
Response headers are not decoded (nothing in them is needed; trailers end the stream).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import struct
import time
from collections.abc import Callable
from typing import cast

from hpack import Encoder

from adapters.grpc.telemetry_client import ACKS, CUMULATIVE
from adapters.tls import client_context
from proto import telemetry_pb2 as pb
from tests.bench.telemetry_load import Player, batch

PATH = "/tuneplane.telemetry.v1.Telemetry/Append"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
STREAM = 1  # the connection's only stream
WINDOW = 1 << 20  # what it lets the gateway send before a WINDOW_UPDATE (acks are tiny)
_HEAD = struct.Struct(">IBI")  # length (24 bits) and type in one word, flags, stream id


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack((len(payload) << 8) | kind, flags, stream) + payload


class Connection(asyncio.Protocol):
    """One TLS connection carrying one ``Append`` stream."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.messages = bytearray()  # the stream's gRPC bytes not yet a whole message
        self.send_conn = self.send_stream = 65_535  # the gateway's windows for what we send
        self.initial = 65_535
        self.max_frame = 16_384
        self.received = 0  # DATA bytes not yet given back by a WINDOW_UPDATE
        self.writable = asyncio.Event()
        self.on_ack: Callable[[pb.Ack], None] = lambda ack: None
        self.on_end: Callable[[], None] = lambda: None
        self.ended = False

    @classmethod
    async def open(cls, host: str, port: int, ctx: ssl.SSLContext) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, host, port, ssl=ctx)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = t = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        t.write(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, WINDOW)))
        t.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65_535)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.end()

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.writable.set()
            self.on_end()

    def close(self) -> None:
        self.ended = True
        if self.transport is not None:
            self.transport.close()

    def start(self, authority: str, token: str, cumulative: bool = False) -> None:
        headers = [
            (":method", "POST"), (":scheme", "https"), (":path", PATH),
            (":authority", authority), ("content-type", "application/grpc"), ("te", "trailers"),
            ("authorization", f"Bearer {token}"),
        ]  # fmt: skip
        if cumulative:  # an ack of seq N acknowledges every batch up to N (telemetry_gateway.py)
            headers.append((ACKS, CUMULATIVE))
        assert self.transport is not None
        self.transport.write(frame(HEADERS, END_HEADERS, STREAM, Encoder().encode(headers)))

    def send_now(self, message: bytes) -> bool:
        """Writes the message in one DATA frame if the windows allow it now (False if not)."""
        size = len(message) + 5
        if self.ended or self.transport is None:
            return False
        if size > min(self.send_conn, self.send_stream, self.max_frame):
            return False
        self.send_conn -= size
        self.send_stream -= size
        head = _HEAD.pack((size << 8) | DATA, 0, STREAM) + struct.pack(">BI", 0, len(message))
        self.transport.write(head + message)
        return True

    async def send(self, message: bytes) -> None:
        data = struct.pack(">BI", 0, len(message)) + message
        while data:
            if self.ended or self.transport is None:
                raise ConnectionError("the stream ended")
            room = min(self.send_conn, self.send_stream, self.max_frame, len(data))
            if room <= 0:
                self.writable.clear()
                await self.writable.wait()
                continue
            self.send_conn -= room
            self.send_stream -= room
            self.transport.write(frame(DATA, 0, STREAM, data[:room]))
            data = data[room:]

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        at = 0
        while len(buf) - at >= 9:
            head = int.from_bytes(buf[at : at + 4])
            length, kind = head >> 8, head & 0xFF
            if len(buf) - at < 9 + length:
                break
            flags = buf[at + 4]
            stream = int.from_bytes(buf[at + 5 : at + 9]) & 0x7FFF_FFFF
            payload = bytes(buf[at + 9 : at + 9 + length])
            at += 9 + length
            self._frame(kind, flags, stream, payload)
        del buf[:at]

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        assert self.transport is not None
        if kind == DATA:
            self.received += len(payload)
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            self._grpc(payload)
            if self.received >= WINDOW // 2:  # give it back, connection and stream
                inc = struct.pack(">I", self.received)
                self.transport.write(
                    frame(WINDOW_UPDATE, 0, 0, inc) + frame(WINDOW_UPDATE, 0, STREAM, inc)
                )
                self.received = 0
            if flags & END_STREAM:
                self.end()
        elif kind == HEADERS:
            if flags & END_STREAM:  # trailers: the gateway ended the stream
                self.end()
        elif kind == SETTINGS:
            if not flags & ACK:
                for i in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack_from(">HI", payload, i)
                    if key == 4:  # SETTINGS_INITIAL_WINDOW_SIZE: open streams change by the delta
                        self.send_stream += value - self.initial
                        self.initial = value
                    elif key == 5:
                        self.max_frame = value
                self.transport.write(frame(SETTINGS, ACK, 0))
                self.writable.set()
        elif kind == WINDOW_UPDATE:
            more = int.from_bytes(payload[:4]) & 0x7FFF_FFFF
            if stream == 0:
                self.send_conn += more
            else:
                self.send_stream += more
            self.writable.set()
        elif kind == PING:
            if not flags & ACK:
                self.transport.write(frame(PING, ACK, 0, payload))
        elif kind in (RST_STREAM, GOAWAY):
            self.end()

    def _grpc(self, payload: bytes) -> None:
        got = self.messages
        got += payload
        at = 0
        while len(got) - at >= 5:
            size = int.from_bytes(got[at + 1 : at + 5])
            if len(got) - at < 5 + size:
                break
            self.on_ack(pb.Ack.FromString(bytes(got[at + 5 : at + 5 + size])))
            at += 5 + size
        del got[:at]


class RawPlayer(Player):
    conn: Connection | None = None
    ctx: ssl.SSLContext | None = None
    live: Connection | None = None  # the connection whose stream is open and idle
    seq = 0
    in_flight: dict[int, int]  # seq -> first record, on the open stream

    def due(self, first: int) -> None:
        """Sent at once when the stream is open, idle and its windows allow (no task switch);
        otherwise queued for the stream's task, which keeps the record order."""
        if self.live is None or not self.wanted.empty() or not self._send_now(self.live, first):
            self.wanted.put_nowait(first)

    def _message(self, first: int) -> bytes:
        n, _ = self.unacked[first]
        self.seq += 1
        self.in_flight[self.seq] = first
        message = pb.Batch(
            seq=self.seq,
            attempt=self.member["attempt"],
            member=self.member["member"],
            sources=[batch(self.member, first, n)],
        )
        return bytes(message.SerializeToString())

    def _send_now(self, conn: Connection, first: int) -> bool:
        # False: the windows are short, the task sends it (its seq is skipped: seqs only rise;
        # forgotten, so that a cumulative ack does not take it for the batch, sent later)
        if conn.send_now(self._message(first)):
            return True
        del self.in_flight[self.seq]
        return False

    async def _open(self) -> Connection:
        if self.ctx is None:
            self.ctx = client_context(self.ca)
            self.ctx.set_alpn_protocols(["h2"])
        return await Connection.open(*self.address, self.ctx)

    async def connect(self) -> None:
        self.conn = await self._open()

    async def reopen(self) -> None:
        await self.close()
        await asyncio.sleep(random.uniform(0.05, 0.5))
        self.conn = None  # opened by the next stream

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def _stream(self, ready: asyncio.Event) -> None:
        if self.conn is None:
            self.conn = await self._open()
        conn = self.conn
        self.in_flight = in_flight = dict[int, int]()
        self.seq = 0
        me = asyncio.current_task()
        assert me is not None

        def on_ack(ack: pb.Ack) -> None:
            if ack.seq not in in_flight:  # as the shipper: an ack of no batch in flight
                conn.close()
                conn.end()
                return
            now = time.time()
            for seq in list(in_flight):  # in seq order; cumulative: every one up to the ack's
                if seq > ack.seq:
                    break
                first = in_flight.pop(seq)
                if first in self.unacked:
                    _, t = self.unacked.pop(first)
                    self.latencies.append((t, now - t))

        idle = False

        def on_end() -> None:  # the stream broke: stop waiting (a send raises by itself)
            self.live = None
            if idle:
                me.cancel()

        conn.on_ack, conn.on_end = on_ack, on_end
        host, port = self.address
        conn.start(f"{host}:{port}", self.member["token"], self.cumulative)
        if conn.ended:
            raise ConnectionError("the connection ended")
        ready.set()
        try:
            while True:
                idle = True
                self.live = conn if not conn.ended else None
                try:
                    first = await self.wanted.get()
                finally:
                    idle = False
                    self.live = None
                if first not in self.unacked:
                    continue
                await conn.send(self._message(first))
        except asyncio.CancelledError:
            if conn.ended and me.uncancel() == 0:
                raise ConnectionError("the gateway ended the stream") from None
            raise
        finally:
            self.live = None
            conn.on_end = lambda: None
