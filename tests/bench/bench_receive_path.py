"""What one batch costs the gateway to receive, stage by stage (not part of the suite).

A server in this process (uvloop, TLS on loopback) and a client in a subprocess (the bench's
raw HTTP/2 client, ``telemetry_load_raw.Connection``): ``BENCH_RX_CONNS`` connections, one
``Append`` stream each, each sending a batch of 100 points (25 records x 4 tags, the streams
bench's batch) and waiting for its ack before the next, as a collector that keeps up does, so
that each batch is its own socket read on the server. The server's CPU
(``time.process_time``; the client's is in its own process) is counted over the batches after
the first ``WARM`` of each connection, and divided by them. One server per mode, each mode
adding a stage to the one before:

* ``floor``: no HTTP/2 at all: an asyncio protocol that finds each DATA frame and writes back a
  ready ack frame (the event loop, TLS and the socket: what any server pays);
* ``recv``: grpclib's server; the handler takes each message as bytes (a codec that does not
  parse) and sends a ready ack: h2's receive, grpclib's message assembly and the ack's send;
* ``parse``: the same, the message parsed into ``pb.Batch`` (protobuf, upb in C);
* ``decode``: and its columns decoded and checked (``telemetry_gateway.source_batch``);
* ``each``: the real ``TelemetryGateway`` with a real ``TelemetryIngest`` and collector tokens
  (an ack per batch, an older collector), down to the store's ``append``, which here returns at
  once (the group and PostgreSQL are ``bench_metric_groups.py``'s);
* ``rounds``: the same for a collector that asks for cumulative acks (the read-ahead task and
  the rounds; what the benchmark's load generator and today's collectors use).

Within the grpclib modes two parts are timed apart (``process_time``, a system call of about a
microsecond, four per batch, counted in the parts and the total):
``H2Protocol.data_received`` (h2's frame parse and state machine, grpclib's event dispatch:
everything done on a read but TLS and the loop) and grpclib's ``send_message`` (the ack's
encoding, framing, TLS and write). The server runs the gateway's collector policy
(``entrypoints/gc_pauses.py``).

Run: ``.venv/bin/pytest tests/bench/bench_receive_path.py -m bench -s``
(``BENCH_RX_CONNS`` (default 200), ``BENCH_RX_BATCHES`` per connection (default 60),
``BENCH_RX_MODES``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvloop
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from grpclib.encoding.proto import ProtoCodec
from grpclib.protocol import H2Protocol
from grpclib.server import Server, Stream

from adapters.collector_tokens import CollectorTokens
from adapters.grpc.telemetry_gateway import TelemetryGateway, source_batch
from adapters.tls import client_context, ensure_dev_pki, server_context
from application.telemetry import TelemetryIngest
from domain.telemetry import Appended, MemberScope
from domain.telemetry_ports import MemberStatus
from entrypoints.gc_pauses import keep_pauses_short, stop_policy
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase
from tests.fixtures.server import free_port

pytestmark = pytest.mark.bench

CONNS = int(os.environ.get("BENCH_RX_CONNS", "200"))
BATCHES = int(os.environ.get("BENCH_RX_BATCHES", "60"))
WARM = 10  # batches per connection before the count starts
MODES = tuple(os.environ.get("BENCH_RX_MODES", "floor,recv,parse,decode,each,rounds").split(","))
ACK = pb.Ack(seq=1, accepted=100, duplicates=0).SerializeToString()


@dataclass
class Meter:
    """The server's CPU over the counted batches, and two parts of it."""

    total: int
    batches: int = 0
    start: float = 0.0
    cpu: float = 0.0
    parts: dict[str, float] = field(default_factory=lambda: {"data_received": 0.0, "send": 0.0})
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def batch(self) -> None:
        self.batches += 1
        if self.batches == CONNS * WARM:
            self.start = time.process_time()
            self.parts = dict.fromkeys(self.parts, 0.0)
        elif self.batches == self.total:
            self.cpu = time.process_time() - self.start
            self.done.set()

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] += seconds


class RawCodec(ProtoCodec):
    """Messages as bytes both ways (``recv``): no protobuf in the path."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        return message if isinstance(message, bytes) else bytes(message.SerializeToString())

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


class Handler(TelemetryBase):
    def __init__(self, mode: str, meter: Meter) -> None:
        self.mode, self.meter = mode, meter

    async def Append(self, stream: Stream[Any, Any]) -> None:
        meter, mode = self.meter, self.mode
        async for message in stream:
            if mode != "recv":
                batch = pb.Batch.FromString(message)
                if mode == "decode":
                    for s in batch.sources:
                        source_batch(s).check()
            await stream.send_message(ACK)
            meter.batch()


class Floor(asyncio.Protocol):
    """HTTP/2 only as far as the client needs: SETTINGS and windows, then an ack frame per DATA
    frame."""

    meter: Meter

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buffer = bytearray()
        self.preface = True
        message = struct.pack(">BI", 0, len(ACK)) + ACK
        self.ack = struct.pack(">IBI", (len(message) << 8) | 0, 0, 1) + message
        big = 2**31 - 1  # windows the client never runs out of (no WINDOW_UPDATE later)
        settings = struct.pack(">HI", 4, big)  # SETTINGS_INITIAL_WINDOW_SIZE
        transport.write(struct.pack(">IBI", (6 << 8) | 4, 0, 0) + settings)
        transport.write(struct.pack(">IBII", (4 << 8) | 8, 0, 0, big - 65_535))

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        at = 24 if self.preface and len(buf) >= 24 else 0
        self.preface = self.preface and at == 0
        while len(buf) - at >= 9:
            head = int.from_bytes(buf[at : at + 4])
            length, kind = head >> 8, head & 0xFF
            if len(buf) - at < 9 + length:
                break
            at += 9 + length
            if kind == 0:
                self.transport.write(self.ack)
                self.meter.batch()
        del buf[:at]


@dataclass
class Sink:
    """The store's place: every batch taken at once (the group's cost is measured elsewhere)."""

    scope: MemberScope
    meter: Meter

    async def member_status(self, member_id: str) -> MemberStatus | None:
        s = self.scope
        return MemberStatus(s.job_id, s.attempt_id, s.member_index, "running", None)

    async def append(self, scope: Any, batches: Any, counters: Any, now: Any) -> Appended:
        for _ in batches:  # the client's batches have one source each
            self.meter.batch()
        return Appended(sum(len(b.points) for b in batches), 0)


@dataclass
class MemoryKeys:
    key: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    async def current(self, now: datetime) -> tuple[str, Ed25519PrivateKey]:
        return "k1", self.key

    async def public(self, kid: str) -> Any:
        return self.key.public_key() if kid == "k1" else None


class Clock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _patch(meter: Meter) -> Any:
    """Times ``data_received`` and grpclib's ``send_message`` (undone by the returned call)."""
    from grpclib import server as grpclib_server

    received, send = H2Protocol.data_received, grpclib_server.Stream.send_message

    def data_received(self: H2Protocol, data: bytes) -> None:
        t0 = time.process_time()
        received(self, data)
        meter.add("data_received", time.process_time() - t0)

    async def send_message(self: Any, message: Any, **kwargs: Any) -> None:
        t0 = time.process_time()
        await send(self, message, **kwargs)
        meter.add("send", time.process_time() - t0)

    H2Protocol.data_received = data_received  # type: ignore[method-assign]
    grpclib_server.Stream.send_message = send_message  # type: ignore[method-assign]

    def undo() -> None:
        H2Protocol.data_received = received  # type: ignore[method-assign]
        grpclib_server.Stream.send_message = send  # type: ignore[method-assign]

    return undo


async def run_mode(mode: str, root: Path) -> dict[str, float]:
    pki = ensure_dev_pki(root, ["localhost", "127.0.0.1"])
    loop = asyncio.get_running_loop()
    meter = Meter(total=CONNS * BATCHES)
    scope = MemberScope("job-1", "att-1", "mem-1", 0)
    tokens = CollectorTokens(MemoryKeys())
    token = await tokens.issue(scope, datetime.now(UTC), int(timedelta(hours=1).total_seconds()))
    port = free_port()
    ctx = server_context(pki.server.cert, pki.server.key)
    undo = _patch(meter)
    pauses = keep_pauses_short(loop.call_soon_threadsafe)  # the gateway's collector policy
    server: Any
    if mode == "floor":
        ctx.set_alpn_protocols(["h2"])
        Floor.meter = meter
        server = await loop.create_server(Floor, "127.0.0.1", port, ssl=ctx)
    elif mode in ("each", "rounds"):
        store: Any = Sink(scope, meter)  # the two methods the ingest calls
        gateway = TelemetryGateway(TelemetryIngest(store, tokens, Clock()))
        server = Server([gateway])
        await server.start("127.0.0.1", port, ssl=ctx)
    else:
        server = Server([Handler(mode, meter)], codec=RawCodec())
        await server.start("127.0.0.1", port, ssl=ctx)
    plan = {"port": port, "ca": str(pki.ca.cert), "token": token,
            "scope": dataclasses.asdict(scope), "cumulative": mode == "rounds"}  # fmt: skip
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench.bench_receive_path", json.dumps(plan),
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        await asyncio.wait_for(meter.done.wait(), 300)
        await client.wait()
    finally:
        undo()
        stop_policy(pauses)
        if client.returncode is None:
            client.kill()
        server.close()
        await server.wait_closed()
    counted = meter.total - CONNS * WARM
    out = {"total": meter.cpu / counted * 1e6}
    out.update({k: v / counted * 1e6 for k, v in meter.parts.items()})
    return out


async def client(plan: dict[str, Any]) -> None:
    from tests.bench.telemetry_load import batch
    from tests.bench.telemetry_load_raw import Connection

    ctx = client_context(Path(plan["ca"]))
    ctx.set_alpn_protocols(["h2"])
    member = {"attempt": plan["scope"]["attempt_id"], "member": plan["scope"]["member_id"]}

    async def one() -> None:
        conn = await Connection.open("127.0.0.1", plan["port"], ctx)
        acked: asyncio.Queue[pb.Ack] = asyncio.Queue()
        conn.on_ack = acked.put_nowait
        conn.start(f"127.0.0.1:{plan['port']}", plan["token"], plan["cumulative"])
        for seq in range(1, BATCHES + 1):
            message = pb.Batch(seq=seq, attempt=member["attempt"], member=member["member"],
                               sources=[batch(member, seq * 25, 25)])  # fmt: skip
            await conn.send(bytes(message.SerializeToString()))
            await acked.get()
        conn.close()

    await asyncio.gather(*(one() for _ in range(CONNS)))


def test_receive_path_costs(tmp_path: Path) -> None:
    results = {mode: uvloop.run(run_mode(mode, tmp_path)) for mode in MODES}
    print(f"\nServer CPU per batch, µs ({CONNS} connections x {BATCHES - WARM} batches counted):")
    print(f"  {'mode':8} {'total':>8} {'data_received':>14} {'ack send':>9}")
    for mode, r in results.items():
        print(f"  {mode:8} {r['total']:8.1f} {r['data_received']:14.1f} {r['send']:9.1f}")


if __name__ == "__main__":
    uvloop.run(client(json.loads(sys.argv[1])))
