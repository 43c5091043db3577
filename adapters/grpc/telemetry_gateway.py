"""The telemetry gateway's gRPC service (grpclib, served over TLS only; proto/telemetry.proto).

One ``Append`` stream per member: the token is checked when the stream opens, each batch is
checked against the token's scope and committed in one transaction, then acknowledged with its
seq. A refused batch ends the stream with its status (UNAUTHENTICATED, PERMISSION_DENIED,
INVALID_ARGUMENT) and nothing of it is written.
"""

from __future__ import annotations

import logging

from grpclib import GRPCError, Status
from grpclib.server import Stream

from adapters.grpc import frame_repr
from adapters.grpc.errors import bearer, grpc_error
from adapters.telemetry.columns import BadColumns, Points
from application import instruments as i
from application import log_context
from application.instruments import NO_INSTRUMENTS, Instruments
from application.telemetry import TelemetryIngest
from domain.errors import InvalidInput, TunePlaneError
from domain.telemetry import SourceBatch
from domain.telemetry_ports import CollectorCounters, TokenClaims
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase

log = logging.getLogger("tuneplane.telemetry")
frame_repr.install()  # h2 builds every received frame's repr for a log line (frame_repr.py)


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
            await stream.send_message(
                pb.Ack(seq=message.seq, accepted=result.accepted, duplicates=result.duplicates)
            )
