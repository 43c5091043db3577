"""The telemetry gateway's gRPC service (grpclib, served over TLS only; proto/telemetry.proto).

One ``Append`` stream per member: the token is checked when the stream opens, each batch is
checked against the token's scope and committed in one transaction, then acknowledged with its
seq. A refused batch ends the stream with its status (UNAUTHENTICATED, PERMISSION_DENIED,
INVALID_ARGUMENT) and nothing of it is written.

**Cumulative acks** (session 45, docs/telemetry.md): a collector that sends the metadata
``tuneplane-acks: cumulative`` takes an ack of ``seq`` N as the ack of every batch up to N. Its
stream's messages are read ahead (``read_ahead.py``); each round takes every batch that arrived
while the last round was being stored (at most ``ROUND``), stores them as one entry of a group
(one transaction, so all or none), and answers one ``Ack`` with the last seq and their summed
counts. When the gateway keeps up a round holds one batch, as before; when it falls behind, a
round holds several batches of the stream for one ack and one group slot, so it gets cheaper
per batch instead of falling further behind. A round is cut before a batch naming another attempt or
member, a seq that does not grow or a malformed batch: the batches before it are stored and
acknowledged, then that one is refused as before. Without the metadata (an older collector,
any other gRPC client) every batch gets its own ack, one at a time.
"""

from __future__ import annotations

import asyncio
import logging

from grpclib import GRPCError, Status
from grpclib.server import Stream

from adapters.grpc import frame_repr
from adapters.grpc.ack_send import send_now
from adapters.grpc.errors import bearer, grpc_error
from adapters.grpc.read_ahead import ReadAhead
from adapters.telemetry.columns import BadColumns, Points
from application import instruments as i
from application import log_context
from application.instruments import NO_INSTRUMENTS, Instruments
from application.telemetry import TelemetryIngest
from domain.errors import InvalidInput, TunePlaneError
from domain.telemetry import Appended, SourceBatch
from domain.telemetry_ports import CollectorCounters, TokenClaims
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase

log = logging.getLogger("tuneplane.telemetry")
frame_repr.install()  # h2 builds every received frame's repr for a log line (frame_repr.py)

ACKS = "tuneplane-acks"  # request metadata: "cumulative" asks for cumulative acks
CUMULATIVE = "cumulative"
ROUND = 16  # batches of one stream stored together at most (one entry of a group)
AHEAD = 32  # batches of one stream read ahead at most (then HTTP/2 flow control holds it)


def source_batch(message: pb.SourceBatch) -> SourceBatch:
    """The message's points as arrays (no Python object per point), checked."""
    try:
        points = Points.from_columns(
            message.tag_names, message.offset, message.tag, message.step, message.wall_time,
            message.value,
        )  # fmt: skip
    except BadColumns as exc:
        raise InvalidInput(
            f"source {message.source!r}: {exc}",
            fix="send one offset, tag index, step, wall time and value per point, each tag"
            " index naming one of tag_names",
        ) from None
    points.check(message.source)
    return SourceBatch(message.source, message.kind, points)  # type: ignore[arg-type]


class TelemetryGateway(TelemetryBase):
    def __init__(
        self, ingest: TelemetryIngest, *, instruments: Instruments = NO_INSTRUMENTS
    ) -> None:
        self.ingest = ingest
        self.instruments = instruments
        self.batches = 0
        self.points = 0

    async def Append(self, stream: Stream[pb.Batch, pb.Ack]) -> None:
        try:
            claims = await self.ingest.authenticate(bearer(stream.metadata))
        except TunePlaneError as exc:
            raise grpc_error(exc) from None
        scope = claims.scope  # every line of this stream names the member's job and index
        with log_context.bound(job_id=scope.job_id, member=scope.member_index):
            if stream.metadata is not None and stream.metadata.get(ACKS) == CUMULATIVE:
                await self._rounds(stream, claims)
            else:
                await self._batches(stream, claims)

    async def _batches(self, stream: Stream[pb.Batch, pb.Ack], claims: TokenClaims) -> None:
        last = 0
        async for message in stream:
            if message.seq <= last:
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"batch seq {message.seq} is not above {last} (fix: number batches from 1)",
                )
            last = message.seq
            c = message.counters
            counters = CollectorCounters(c.corrupt_records, c.dropped_records, c.dropped_bytes)
            measure = self.instruments
            try:
                with measure.timer(i.BATCH_SECONDS):
                    batches = [source_batch(s) for s in message.sources]
                    result = await self.ingest.append(
                        claims, message.attempt, message.member, batches, counters
                    )
            except TunePlaneError as exc:
                log.warning("refused a batch for member %s: %s", message.member, exc)
                measure.inc(i.BATCHES, outcome="refused")
                raise grpc_error(exc) from None
            measure.inc(i.BATCHES, outcome="stored")
            measure.inc(i.POINTS_STORED, result.accepted)
            measure.inc(i.POINTS_DUPLICATE, result.duplicates)
            self.batches += 1
            self.points += result.accepted
            ack = pb.Ack(seq=message.seq, accepted=result.accepted, duplicates=result.duplicates)
            if not send_now(stream, ack):  # h2 directly when nothing holds it back (ack_send.py)
                await stream.send_message(ack)

    async def _rounds(self, stream: Stream[pb.Batch, pb.Ack], claims: TokenClaims) -> None:
        """A cumulative stream: the batches that arrived meanwhile, stored together, one ack."""
        ahead: ReadAhead[pb.Batch] = ReadAhead(stream, AHEAD)
        reader = asyncio.get_running_loop().create_task(ahead.run())
        last = 0
        try:
            while messages := await ahead.take(ROUND):
                last = await self._round(stream, claims, ahead, messages, last)
        finally:
            reader.cancel()

    async def _round(
        self,
        stream: Stream[pb.Batch, pb.Ack],
        claims: TokenClaims,
        ahead: ReadAhead[pb.Batch],
        messages: list[pb.Batch],
        last: int,
    ) -> int:
        """Stores the longest good prefix of ``messages`` in one entry and acks its last seq;
        then raises for the batch that cut it, if any. Returns the last seq acked."""
        first = messages[0]
        batches: list[SourceBatch] = []
        taken = 0
        refusal: Exception | None = None
        for message in messages:
            if (message.attempt, message.member) != (first.attempt, first.member):
                ahead.put_back(messages[taken:])  # its own round: refused or stored alone
                break
            if message.seq <= last:
                refusal = GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"batch seq {message.seq} is not above {last} (fix: number batches from 1)",
                )
                break
            try:
                these = [source_batch(s) for s in message.sources]
                for b in these:
                    b.check()
            except TunePlaneError as exc:
                log.warning("refused a batch for member %s: %s", message.member, exc)
                self.instruments.inc(i.BATCHES, outcome="refused")
                refusal = grpc_error(exc)
                break
            batches += these
            last = message.seq
            taken += 1
        if taken:
            done = messages[taken - 1]
            result = await self._store(claims, first, batches, done.counters, taken)
            ack = pb.Ack(seq=done.seq, accepted=result.accepted, duplicates=result.duplicates)
            if not send_now(stream, ack):
                await stream.send_message(ack)
        if refusal is not None:
            raise refusal
        return last

    async def _store(
        self,
        claims: TokenClaims,
        first: pb.Batch,
        batches: list[SourceBatch],
        c: pb.Counters,
        taken: int,
    ) -> Appended:
        counters = CollectorCounters(c.corrupt_records, c.dropped_records, c.dropped_bytes)
        measure = self.instruments
        try:
            with measure.timer(i.BATCH_SECONDS):
                result = await self.ingest.append(
                    claims, first.attempt, first.member, batches, counters
                )
        except TunePlaneError as exc:
            log.warning("refused a batch for member %s: %s", first.member, exc)
            measure.inc(i.BATCHES, taken, outcome="refused")
            raise grpc_error(exc) from None
        measure.inc(i.BATCHES, taken, outcome="stored")
        measure.inc(i.POINTS_STORED, result.accepted)
        measure.inc(i.POINTS_DUPLICATE, result.duplicates)
        self.batches += taken
        self.points += result.accepted
        return result
