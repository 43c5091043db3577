"""Acks written through h2 directly (``adapters/grpc/ack_send.py``): only when nothing holds
them back, in order, with h2's flow-control windows kept right (a grpclib client over TLS)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.server import Server, Stream

from adapters.grpc.ack_send import send_now
from adapters.tls import client_context, ensure_dev_pki, server_context
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase, TelemetryStub
from tests.fixtures.server import free_port


class Acker(TelemetryBase):
    """Acks each batch's seq: first through grpclib, then directly until the client's window
    is full, then through grpclib again (which waits for the window)."""

    def __init__(self) -> None:
        self.before_headers: bool | None = None
        self.direct = 0
        self.refused_at_window = False

    async def Append(self, stream: Stream[pb.Batch, pb.Ack]) -> None:
        first = await stream.recv_message()
        assert first is not None
        self.before_headers = send_now(stream, pb.Ack(seq=0))  # headers not sent: refused
        await stream.send_message(pb.Ack(seq=1))
        seq = 1
        while seq < 20_000:  # a 64 KiB window holds about 5,000 acks of 12 bytes
            if not send_now(stream, pb.Ack(seq=seq + 1, accepted=100, duplicates=7)):
                self.refused_at_window = True
                break
            seq += 1
            self.direct += 1
        for _ in range(3):  # the ordinary path waits for the client to read and give room back
            seq += 1
            await stream.send_message(pb.Ack(seq=seq, accepted=100, duplicates=7))
        seq += 1
        assert send_now(stream, pb.Ack(seq=seq, accepted=100, duplicates=7))  # room again
        await stream.recv_message()  # until the client ends


async def test_acks_sent_directly_arrive_in_order_and_respect_the_window(tmp_path: Path) -> None:
    pki = ensure_dev_pki(tmp_path, ["localhost", "127.0.0.1"])
    acker = Acker()
    server = Server([acker])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    small = Configuration(http2_connection_window_size=2**16, http2_stream_window_size=2**16)
    channel = Channel("127.0.0.1", port, ssl=client_context(pki.ca.cert), config=small)
    try:
        async with TelemetryStub(channel).Append.open() as s:
            await s.send_message(pb.Batch(seq=1))
            await asyncio.sleep(0.2)  # the server fills the window before the client reads
            seqs: list[int] = []
            while len(seqs) < acker.direct + 5:
                ack = await asyncio.wait_for(s.recv_message(), 10)
                assert ack is not None
                seqs.append(ack.seq)
            await s.end()
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
    assert acker.before_headers is False
    assert acker.refused_at_window and 4_000 < acker.direct < 6_000
    assert seqs == list(range(1, len(seqs) + 1))  # every ack once, in order, none lost
