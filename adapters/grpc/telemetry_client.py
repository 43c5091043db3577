"""The collector's shipping side: one ``Append`` stream per member (proto/telemetry.proto).

A batch leaves the spool only when its ``Ack`` came back; on any failure the stream is opened
again after a pause (doubling from 0.2 s to 5 s, with jitter so that collectors restarted
together do not knock together) and the same records are sent again: the gateway stores each
record once. A token the gateway refuses (expired, or its attempt ended long ago) stops the
member's shipping until its member file carries another token; nothing spins.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from dataclasses import dataclass

from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.exceptions import ProtocolError, StreamTerminatedError

from adapters.telemetry.spool import Spool, SpoolBatch
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryStub

log = logging.getLogger("tuneplane.collector")

BATCH_POINTS = 10_000
REFUSED = frozenset({Status.UNAUTHENTICATED, Status.PERMISSION_DENIED})
_NETWORK = (OSError, ssl.SSLError, StreamTerminatedError, ProtocolError, TimeoutError)


@dataclass
class Ticket:
    """Whom a member's stream speaks for."""

    attempt: str
    member: str
    token: str


def to_message(seq: int, ticket: Ticket, batch: SpoolBatch, spool: Spool) -> pb.Batch:
    c = spool.counters(ticket.member)
    message = pb.Batch(
        seq=seq,
        attempt=ticket.attempt,
        member=ticket.member,
        counters=pb.Counters(
            corrupt_records=c.corrupt_records,
            dropped_records=c.dropped_records,
            dropped_bytes=c.dropped_bytes,
        ),
    )
    for b in batch.sources:
        names: dict[str, int] = {}
        index = [names.setdefault(t, len(names)) for t in b.tags]
        message.sources.append(
            pb.SourceBatch(
                source=b.source,
                kind=b.kind,
                tag_names=list(names),
                tag=index,
                step=b.steps,
                wall_time=b.walls,
                value=b.values,
                offset=b.offsets,
            )
        )
    return message


class Shipper:
    def __init__(
        self,
        channel: Channel,
        spool: Spool,
        ticket: Ticket,
        *,
        batch_points: int = BATCH_POINTS,
        idle: float = 0.2,
        timeout: float = 60.0,
    ) -> None:
        self.channel = channel
        self.spool = spool
        self.ticket = ticket
        self.batch_points = batch_points
        self.idle = idle
        self.timeout = timeout
        self.refused: str | None = None  # why the gateway refused the current token
        self.shipped = 0  # points acknowledged
        self.failures = 0
        self._token_changed = asyncio.Event()

    def new_token(self, token: str) -> None:
        if token != self.ticket.token:
            self.ticket.token = token
            self.refused = None
            self._token_changed.set()

    async def run(self) -> None:
        """Ship until cancelled."""
        pause = 0.2
        while True:
            if self.refused is not None:
                await self._token_changed.wait()
                self._token_changed.clear()
                continue
            try:
                await self._stream()
                pause = 0.2
            except GRPCError as exc:
                if exc.status in REFUSED:
                    self.refused = f"{exc.status.name}: {exc.message}"
                    log.error(
                        "the gateway refused member %s's token (%s); waiting for a new one",
                        self.ticket.member,
                        self.refused,
                    )
                    continue
                self._failed(f"{exc.status.name}: {exc.message}")
            except _NETWORK as exc:
                self._failed(repr(exc))
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, 5.0)

    def _failed(self, why: str) -> None:
        self.failures += 1
        log.warning("shipping member %s: %s; sending again", self.ticket.member, why)

    async def _stream(self) -> None:
        stub = TelemetryStub(self.channel)
        metadata = {"authorization": f"Bearer {self.ticket.token}"}
        async with stub.Append.open(metadata=metadata, timeout=None) as stream:
            seq = 0
            while True:
                batch = await asyncio.to_thread(
                    self.spool.batch, self.ticket.member, self.batch_points
                )
                if batch is None:
                    if self._token_changed.is_set():
                        self._token_changed.clear()
                        return  # open a stream with the new token
                    await asyncio.sleep(self.idle)
                    continue
                seq += 1
                message = to_message(seq, self.ticket, batch, self.spool)
                await asyncio.wait_for(stream.send_message(message), self.timeout)
                ack = await asyncio.wait_for(stream.recv_message(), self.timeout)
                if ack is None or ack.seq != seq:
                    raise StreamTerminatedError(f"no acknowledgement for batch {seq}")
                await asyncio.to_thread(self.spool.ack, self.ticket.member, batch.up_to)
                self.shipped += batch.points
