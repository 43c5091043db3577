"""The load generator's collectors on grpcio's ``grpc.aio`` client (C-core HTTP/2 and TLS).

Only the load generator: the collectors ship with grpclib (``telemetry_client.py``). A pure
Python HTTP/2 client playing 2,000 collectors took about a quarter of the benchmark's CPU, the
same share as the gateway's ingest; C-core does the framing, the TLS and the flow control in C.
The stream's behaviour is ``telemetry_load.Player``'s: one connection and one ``Append`` stream
per member (a local subchannel pool: C-core would otherwise share one connection among every
channel to the same address), each batch timed from its tick to its ack, a failed stream
reopened and every unacknowledged batch sent again with the same record offsets. The BDP probe
is off: its PINGs cost the grpclib gateway a frame each to answer.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc

from proto import telemetry_pb2 as pb
from tests.bench.telemetry_load import Player

APPEND = "/tuneplane.telemetry.v1.Telemetry/Append"
OPTIONS = [
    ("grpc.http2.bdp_probe", 0),
    ("grpc.use_local_subchannel_pool", 1),  # a connection per member, as on separate hosts
]


class AioPlayer(Player):
    aio: Any = None  # grpc.aio.Channel

    def _open(self) -> None:
        host, port = self.address
        creds = grpc.ssl_channel_credentials(root_certificates=self.ca.read_bytes())
        self.aio = grpc.aio.secure_channel(f"{host}:{port}", creds, options=OPTIONS)

    async def connect(self) -> None:
        self._open()
        await self.aio.channel_ready()

    async def reopen(self) -> None:
        await self.close()
        await asyncio.sleep(random.uniform(0.05, 0.5))
        self._open()

    async def close(self) -> None:
        if self.aio is not None:
            await self.aio.close()

    async def _stream(self, ready: asyncio.Event) -> None:
        append = self.aio.stream_stream(
            APPEND,
            request_serializer=pb.Batch.SerializeToString,
            response_deserializer=pb.Ack.FromString,
        )
        call = append(metadata=(("authorization", f"Bearer {self.member['token']}"),))
        ready.set()
        try:
            await self.pump(call, call.write)
        finally:
            call.cancel()
