"""The collector's shipping side: one ``Append`` stream per member (proto/telemetry.proto).

Batches of about ``BATCH_POINTS`` points are taken from the spool in record order; up to
``WINDOW`` of them are in flight on a stream, and acks come back in order. The stream asks for
cumulative acks (metadata ``tuneplane-acks: cumulative``): an ack of ``seq`` N acknowledges every
batch up to N, so a gateway that fell behind stores the batches that queued up together and
answers once; a gateway that does not know the metadata acks each batch, which is the same
thing one batch at a time. A batch's records leave the spool only when an ``Ack`` of its seq or
a later one came back. On any failure (connection refused, stream
reset, UNAVAILABLE, no ack within ``timeout``) the stream is opened again after a pause
(exponential with full jitter, 0.2 s doubling up to 5 s, so collectors restarted together do
not knock together; the first retry after a stream that made progress is immediate) and every
unacknowledged record is sent again: the gateway stores each (member, source, offset) once.

A token the gateway refuses (UNAUTHENTICATED, PERMISSION_DENIED: expired, or its attempt ended
too long ago) stops the member's shipping, logged once; its records stay in the spool until
the member file carries another token (``new_token``). Nothing spins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.exceptions import ProtocolError, StreamTerminatedError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from adapters.telemetry.spool import Counters, Spool, SpoolBatch
from adapters.tls import client_context
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryStub

ACKS, CUMULATIVE = "tuneplane-acks", "cumulative"  # the gateway's side: telemetry_gateway.py

log = logging.getLogger("tuneplane.collector")

BATCH_POINTS = 10_000
WINDOW = 4  # batches in flight on one stream
PAUSE, MAX_PAUSE = 0.2, 5.0
REFUSED = frozenset({Status.UNAUTHENTICATED, Status.PERMISSION_DENIED})


def open_channel(host: str, port: int, ca_file: Path, server_name: str | None = None) -> Channel:
    """A TLS channel to the telemetry gateway, verified against ``ca_file`` (its certificate
    must name ``server_name``, by default ``host``)."""
    config = Configuration(ssl_target_name_override=server_name) if server_name else None
    return Channel(host, port, ssl=client_context(ca_file), config=config)


@dataclass
class Ticket:
    """Whom a member's stream speaks for."""

    attempt: str
    member: str
    token: str


def to_message(seq: int, ticket: Ticket, batch: SpoolBatch, c: Counters) -> pb.Batch:
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
        offset, tag, step, wall, value = b.points.column_bytes()
        message.sources.append(
            pb.SourceBatch(
                source=b.name,
                kind=b.kind,
                tag_names=b.points.tags,
                offset=offset,
                tag=tag,
                step=step,
                wall_time=wall,
                value=value,
            )
        )
    return message


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, GRPCError):
        return exc.status not in REFUSED
    return isinstance(exc, OSError | ssl.SSLError | StreamTerminatedError | ProtocolError)


class _Progressed(Exception):
    """A stream that had carried batches failed: open the next one at once."""


class Shipper:
    def __init__(
        self,
        channel: Channel,
        spool: Spool,
        ticket: Ticket,
        *,
        batch_points: int = BATCH_POINTS,
        window: int = WINDOW,
        idle: float = 1.0,
        timeout: float = 60.0,
        max_pause: float = MAX_PAUSE,
    ) -> None:
        self.channel = channel
        self.spool = spool
        self.ticket = ticket
        self.batch_points = batch_points
        self.window = window
        self.idle = idle
        self.timeout = timeout
        self.max_pause = max_pause
        self.refused: str | None = None  # why the gateway refused the current token
        self.shipped = 0  # points acknowledged
        self.failures = 0  # streams that failed
        self.acked_counters = Counters(-1, -1, -1)  # the counters the gateway last acknowledged
        self.streams = 0  # streams opened
        self._token_changed = asyncio.Event()
        self._wake = asyncio.Event()

    def new_token(self, token: str) -> None:
        """The member file carries ``token`` (maybe the same): use it from the next stream."""
        if token != self.ticket.token:
            self.ticket.token = token
            self.refused = None
            self._token_changed.set()
            self._wake.set()

    def wake(self) -> None:
        """New records were spooled: look at once instead of after ``idle``."""
        self._wake.set()

    def settled(self) -> bool:
        """Everything spooled for the member, counters included, was acknowledged (blocking:
        reads the spool)."""
        member = self.ticket.member
        return not self.spool.pending(member) and self.spool.counters(member) == self.acked_counters

    def _take(self, after: int) -> tuple[SpoolBatch | None, Counters]:
        member = self.ticket.member
        return self.spool.batch(member, self.batch_points, after), self.spool.counters(member)

    async def run(self) -> None:
        """Ship until cancelled."""
        while True:
            if self.refused is not None:
                await self._token_changed.wait()
                continue
            self._token_changed.clear()
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception(_transient),
                    wait=wait_random_exponential(multiplier=PAUSE, max=self.max_pause),
                    before_sleep=self._failed,
                    reraise=True,
                ):
                    with attempt:
                        await self._stream()
            except _Progressed as exc:
                why = exc.__cause__
                log.info("member %s's stream ended (%s: %s); opening another", self.ticket.member,
                         type(why).__name__, why)  # fmt: skip
                continue
            except GRPCError as exc:  # refused: not retried
                self.refused = f"{exc.status.name}: {exc.message}"
                log.error(
                    "the telemetry gateway refused the token of member %s (%s): its shipping "
                    "stops, its metrics stay in the spool until the node daemon gives it a new "
                    "token",
                    self.ticket.member,
                    self.refused,
                )

    def _failed(self, state: RetryCallState) -> None:
        self.failures += 1
        exc = state.outcome.exception() if state.outcome else None
        why = f"{exc.status.name}: {exc.message}" if isinstance(exc, GRPCError) else str(exc)
        if state.attempt_number in (1, 10) or state.attempt_number % 100 == 0:
            log.warning(
                "shipping member %s: %s; sending again (attempt %d)",
                self.ticket.member,
                why,
                state.attempt_number,
            )

    async def _stream(self) -> None:
        """One stream: send every unacknowledged batch, in order, then what gets spooled.
        Returns when the token changed (after every batch in flight was acknowledged)."""
        member = self.ticket.member
        metadata = {"authorization": f"Bearer {self.ticket.token}", ACKS: CUMULATIVE}
        stub = TelemetryStub(self.channel)
        self.streams += 1
        inflight: deque[tuple[int, SpoolBatch, Counters]] = deque()
        seq, after, acked, sent = 0, 0, 0, self.acked_counters
        try:
            async with stub.Append.open(metadata=metadata) as stream:
                while True:
                    while len(inflight) < self.window and not self._token_changed.is_set():
                        batch, counters = await asyncio.to_thread(self._take, after)
                        if batch is None:
                            if counters == sent:
                                break
                            batch = SpoolBatch(up_to=0)  # no point: the counters changed
                        seq += 1
                        message = to_message(seq, self.ticket, batch, counters)
                        await asyncio.wait_for(stream.send_message(message), self.timeout)
                        inflight.append((seq, batch, counters))
                        after, sent = max(after, batch.up_to), counters
                    if not inflight:
                        if self._token_changed.is_set():
                            await stream.end()
                            return  # the next stream carries the new token
                        self._wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), self.idle)
                        continue
                    ack = await asyncio.wait_for(stream.recv_message(), self.timeout)
                    acked += await self._acked(inflight, ack)
                    if self.failures:
                        log.info("shipping member %s again", member)
                        self.failures = 0
        except GRPCError as exc:
            if exc.status not in REFUSED and acked:
                raise _Progressed() from exc
            raise
        except Exception as exc:  # any transport or protocol fault: TCP, TLS, HTTP/2, a
            # truncated message (grpclib's AssertionError), a timeout; never the end of shipping
            if acked:  # this stream carried batches: the next one is opened at once
                raise _Progressed() from exc
            raise StreamTerminatedError(f"{type(exc).__name__}: {exc}") from exc

    async def _acked(
        self, inflight: deque[tuple[int, SpoolBatch, Counters]], ack: pb.Ack | None
    ) -> int:
        """Takes the batches ``ack`` acknowledges (its seq and every one before it) off the
        spool; returns how many. An ack of no batch in flight ends the stream."""
        if ack is None or not inflight[0][0] <= ack.seq <= inflight[-1][0]:
            got = "the end of the stream" if ack is None else f"ack {ack.seq}"
            first, last = inflight[0][0], inflight[-1][0]
            raise StreamTerminatedError(f"expected an ack of {first} to {last}, got {got}")
        done = []
        while inflight and inflight[0][0] <= ack.seq:
            done.append(inflight.popleft())
        # counted as the gateway acknowledged them, before the spool forgets them (in a thread:
        # a reader that sees the spool empty must see every point counted; a CI run read between)
        self.acked_counters = done[-1][2]
        self.shipped += sum(batch.points for _, batch, _ in done)
        up_to = max(batch.up_to for _, batch, _ in done)
        if up_to:  # spool rows up to this id, all in the batches acked (spool.py)
            await asyncio.to_thread(self.spool.ack, self.ticket.member, up_to)
        return len(done)
