"""What one ack costs the gateway to send: grpclib's ``send_message`` against h2 directly and
against a bare transport write of the same frame, on one TLS connection (not part of the suite).

A grpclib server (uvloop, TLS on loopback) with one ``Append`` stream; once the stream is open
the handler sends ``BENCH_ACKS_N`` acks in a row three ways, three times each, timing its own CPU
(``time.process_time``) over each run of sends only (no send in the loop waits: the client's
windows are large, and it reads the acks between runs):

* ``grpclib``: ``stream.send_message(ack)``, what the gateway does;
* ``h2``: the same bytes (gRPC prefix and the serialized ``Ack``) through h2's ``send_data`` and
  one ``transport.write`` (h2's framing and flow-control accounting, no grpclib);
* ``write``: the finished DATA frame written as is (TLS and the socket's ``send``: the floor).

Run: ``.venv/bin/pytest tests/bench/bench_ack_send.py -m bench -s``
"""

from __future__ import annotations

import asyncio
import os
import statistics
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop
from grpclib.client import Channel
from grpclib.server import Server, Stream

from adapters.tls import client_context, ensure_dev_pki, server_context
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase, TelemetryStub
from tests.fixtures.server import free_port

pytestmark = pytest.mark.bench

N = int(os.environ.get("BENCH_ACKS_N", "3000"))
MODES = ("grpclib", "h2", "write")


class Sender(TelemetryBase):
    def __init__(self) -> None:
        self.costs: dict[str, list[float]] = {m: [] for m in MODES}
        self.sent = 0

    async def Append(self, stream: Stream[pb.Batch, pb.Ack]) -> None:
        await stream.recv_message()
        ack = pb.Ack(seq=123_456, accepted=100, duplicates=0)
        await stream.send_message(ack)  # headers out; the rest are DATA frames only
        h2s: Any = stream._stream  # grpclib.protocol.Stream
        conn, transport = h2s._h2_connection, h2s._transport
        body = ack.SerializeToString()
        message = struct.pack(">BI", 0, len(body)) + body
        frame = struct.pack(">IBI", (len(message) << 8) | 0, 0, h2s.id) + message
        for mode in MODES * 3:
            t0 = time.process_time()
            if mode == "grpclib":
                for _ in range(N):
                    await stream.send_message(ack)
            elif mode == "h2":
                for _ in range(N):
                    conn.send_data(h2s.id, message)
                    transport.write(conn.data_to_send())
            else:
                for _ in range(N):
                    transport.write(frame)
            self.costs[mode].append((time.process_time() - t0) / N * 1e6)
            self.sent += N
            await asyncio.sleep(0.3)  # the client reads them and gives the windows back
        await stream.recv_message()  # until the client ends


async def measure(root: Path) -> dict[str, list[float]]:
    pki = ensure_dev_pki(root, ["localhost", "127.0.0.1"])
    sender = Sender()
    server = Server([sender])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    channel = Channel("127.0.0.1", port, ssl=client_context(pki.ca.cert))
    try:
        async with TelemetryStub(channel).Append.open(metadata={"authorization": "x"}) as s:
            await s.send_message(pb.Batch(seq=1))
            got = 0
            while got < 1 + 9 * N:
                if await s.recv_message() is None:
                    break
                got += 1
            await s.end()
        assert got == 1 + 9 * N
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
    return sender.costs


def test_ack_send_costs(tmp_path: Path) -> None:
    costs = uvloop.run(measure(tmp_path))
    print(f"\nCPU per ack, µs (three runs of {N:,} each; median):")
    for mode in MODES:
        runs = " / ".join(f"{c:.1f}" for c in costs[mode])
        print(f"  {mode:8} {runs}  median {statistics.median(costs[mode]):.1f}")
