"""Cumulative acks (session 45): the batches of a stream that arrive while its last round is
being stored go into one round (one entry of a group: one transaction, all or none) and get one
ack of the last seq. Over real gRPC and TLS on loopback, with PostgreSQL: a duplicate batch in a
round, a round cut before a bad batch, an older collector (an ack a batch), the collector's
shipper against the gateway and against an older gateway, the connection cut between a
round's commit and its ack, and two gateways given the same batches of one source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.server import Server, Stream
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.collector_tokens import CollectorTokens
from adapters.grpc.errors import bearer
from adapters.grpc.read_ahead import ReadAhead
from adapters.grpc.telemetry_client import ACKS, CUMULATIVE, Shipper, Ticket, open_channel
from adapters.grpc.telemetry_gateway import TelemetryGateway
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.telemetry.spool import Spool
from adapters.telemetry.tailer import MemberTail
from adapters.tls import DevPki, client_context, ensure_dev_pki, server_context
from application.telemetry import TelemetryIngest
from domain.telemetry import Appended, MemberScope, SourceBatch
from domain.telemetry_ports import CollectorCounters, MemberStatus, TokenClaims
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryStub
from tests.contract.builders import a_job, a_member, an_attempt
from tests.fixtures.recording_telemetry import until, write_lines
from tests.fixtures.server import free_port
from tests.support.context import FakeClock
from tests.support.cutting_relay import Proxy

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 7, 3, tzinfo=UTC)
DAY = 86400


class Gated:
    """The real store; an append waits while ``gate`` is clear (a slow database) and counts as
    ``waiting`` meanwhile; ``after_commit`` is called once after the next commit, before the
    ack."""

    def __init__(self, store: PostgresMetrics) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0
        self.sizes: list[int] = []  # source batches per append
        self.after_commit: Any = None

    async def append(
        self,
        scope: MemberScope,
        batches: Sequence[SourceBatch],
        counters: CollectorCounters,
        now: datetime,
    ) -> Appended:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        result = await self.store.append(scope, batches, counters, now)
        self.sizes.append(len(batches))
        if self.after_commit is not None:
            hook, self.after_commit = self.after_commit, None
            hook()
        return result

    async def member_status(self, member_id: str) -> MemberStatus | None:
        return await self.store.member_status(member_id)


class Watched(TelemetryGateway):
    """The gateway, recording each round's seqs and its read-ahead queue."""

    def __init__(self, ingest: TelemetryIngest) -> None:
        super().__init__(ingest)
        self.rounds: list[list[int]] = []
        self.ahead: ReadAhead[pb.Batch] | None = None

    async def _round(
        self,
        stream: Stream[pb.Batch, pb.Ack],
        claims: TokenClaims,
        ahead: ReadAhead[pb.Batch],
        messages: list[pb.Batch],
        last: int,
    ) -> int:
        self.ahead = ahead
        self.rounds.append([m.seq for m in messages])
        return await super()._round(stream, claims, ahead, messages, last)


class Older(Watched):
    """A gateway from before cumulative acks: an ack per batch, whatever the metadata says."""

    async def Append(self, stream: Stream[pb.Batch, pb.Ack]) -> None:
        claims = await self.ingest.authenticate(bearer(stream.metadata))
        await self._batches(stream, claims)


@dataclass
class Rig:
    pki: DevPki
    pool: Any
    gated: Gated
    ingest: TelemetryIngest
    tokens: CollectorTokens
    scopes: list[MemberScope]
    servers: list[tuple[Server, Watched, int]] = field(default_factory=list)

    async def serve(self, kind: type[Watched] = Watched) -> tuple[Watched, Channel, int]:
        gateway = kind(self.ingest)
        server = Server([gateway])
        port = free_port()
        ssl = server_context(self.pki.server.cert, self.pki.server.key)
        await server.start("127.0.0.1", port, ssl=ssl)
        self.servers.append((server, gateway, port))
        return gateway, Channel("127.0.0.1", port, ssl=client_context(self.pki.ca.cert)), port

    async def points(self, member: str) -> tuple[int, int]:
        """(points stored, distinct offsets) of the member."""
        row = await self.pool.fetchrow(
            "SELECT count(*) AS n, count(DISTINCT record_offset) AS d FROM metric_points p"
            " JOIN metric_series s ON s.id = p.series_id WHERE s.member_id = $1",
            member,
        )
        return int(row["n"]), int(row["d"])


@pytest.fixture
async def rig(tmp_path: Path, pg_url: str, pg_engine: AsyncEngine) -> AsyncIterator[Rig]:
    scopes: list[MemberScope] = []
    async with PostgresUnitOfWork(pg_engine) as uow:
        job = a_job()
        await uow.jobs.add(job)
        attempt = an_attempt(job, 1)
        await uow.attempts.add(attempt)
        for index in range(2):
            m = a_member(attempt, index)
            await uow.members.add(m)
            scopes.append(MemberScope(job.id, attempt.id, m.id, index))
        await uow.commit()
    pool = await create_pool(pg_url)
    tokens = CollectorTokens(PostgresSigningKeys(pool))
    gated = Gated(PostgresMetrics(pool))
    ingest = TelemetryIngest(gated, tokens, FakeClock(T0), grace=timedelta(minutes=10))  # type: ignore[arg-type]
    pki = ensure_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
    r = Rig(pki, pool, gated, ingest, tokens, scopes)
    try:
        yield r
    finally:
        for server, _, _ in r.servers:
            server.close()
            await server.wait_closed()
        await pool.close()


def batch(scope: MemberScope, seq: int, offsets: range, *, ragged: bool = False) -> pb.Batch:
    o = np.array(list(offsets), "<i8")
    source = pb.SourceBatch(
        source="train.jsonl#0",
        kind="jsonl",
        tag_names=["train/loss"],
        tag=np.zeros(len(o), "<u4").tobytes(),
        offset=o.tobytes(),
        step=o.tobytes()[: -3 if ragged else None],
        wall_time=(o + 1.7e9).astype("<f8").tobytes(),
        value=(o / 2).astype("<f8").tobytes(),
    )
    return pb.Batch(
        seq=seq, attempt=scope.attempt_id, member=scope.member_id, sources=[source],
        counters=pb.Counters(corrupt_records=seq),
    )  # fmt: skip


async def held_window(
    rig: Rig,
    gateway: Watched,
    channel: Channel,
    token: str,
    batches: list[pb.Batch],
    *,
    cumulative: bool = True,
) -> tuple[list[pb.Ack], Status | None]:
    """Sends the first batch, holds its store until every other one was sent (and, on a
    cumulative stream, read ahead by the gateway), then lets it go; returns the acks and the
    status the stream ended with (None: OK)."""
    metadata = {"authorization": f"Bearer {token}"}
    if cumulative:
        metadata[ACKS] = CUMULATIVE
    acks: list[pb.Ack] = []
    rig.gated.gate.clear()
    try:
        async with TelemetryStub(channel).Append.open(metadata=metadata) as stream:
            await stream.send_message(batches[0])
            await until(lambda: rig.gated.waiting == 1)
            for b in batches[1:]:
                await stream.send_message(b)
            await stream.end()
            if cumulative:
                ahead = len(batches) - 1
                await until(lambda: gateway.ahead is not None and gateway.ahead.ended)
                assert gateway.ahead is not None and len(gateway.ahead.queue) == ahead
            rig.gated.gate.set()
            while (ack := await stream.recv_message()) is not None:
                acks.append(ack)
    except GRPCError as exc:
        return acks, exc.status
    finally:
        rig.gated.gate.set()
    return acks, None


async def test_batches_queued_behind_a_slow_round_are_stored_together_with_one_ack(
    rig: Rig,
) -> None:
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    gateway, channel, _ = await rig.serve()
    async with channel:
        batches = [batch(scope, s, range(3 * s, 3 * s + 3)) for s in range(1, 6)]
        acks, status = await held_window(rig, gateway, channel, token, batches)
    assert status is None
    assert [(a.seq, a.accepted, a.duplicates) for a in acks] == [(1, 3, 0), (5, 12, 0)]
    assert gateway.rounds == [[1], [2, 3, 4, 5]]
    assert rig.gated.sizes == [1, 4]  # one entry of a group: one transaction for the four
    assert await rig.points(scope.member_id) == (15, 15)
    counters = await rig.pool.fetchval(
        "SELECT corrupt_records FROM telemetry_members WHERE member_id = $1", scope.member_id
    )
    assert counters == 5  # the last batch's (cumulative) counters


async def test_a_duplicate_batch_in_a_round_is_stored_once(rig: Rig) -> None:
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    gateway, channel, _ = await rig.serve()
    async with channel:
        batches = [batch(scope, 1, range(3)), batch(scope, 2, range(3, 6)),
                   batch(scope, 3, range(3, 6)), batch(scope, 4, range(4, 9))]  # fmt: skip
        acks, status = await held_window(rig, gateway, channel, token, batches)
    assert status is None
    assert [(a.seq, a.accepted, a.duplicates) for a in acks] == [(1, 3, 0), (4, 6, 5)]
    assert await rig.points(scope.member_id) == (9, 9)


@pytest.mark.parametrize("fault", ["malformed", "seq", "member"])
async def test_a_round_is_cut_before_a_bad_batch(rig: Rig, fault: str) -> None:
    """The batches before the bad one are stored and acknowledged, the bad one is refused as
    alone (nothing of it written), and nothing after it is stored."""
    scope, other = rig.scopes
    token = await rig.tokens.issue(scope, T0, DAY)
    gateway, channel, _ = await rig.serve()
    bad = {
        "malformed": batch(scope, 3, range(6, 9), ragged=True),
        "seq": batch(scope, 2, range(6, 9)),
        "member": batch(other, 3, range(6, 9)),
    }[fault]
    async with channel:
        batches = [batch(scope, 1, range(3)), batch(scope, 2, range(3, 6)), bad,
                   batch(scope, 4, range(9, 12))]  # fmt: skip
        acks, status = await held_window(rig, gateway, channel, token, batches)
    expected = Status.PERMISSION_DENIED if fault == "member" else Status.INVALID_ARGUMENT
    assert status == expected
    assert [(a.seq, a.accepted) for a in acks] == [(1, 3), (2, 3)]
    assert await rig.points(scope.member_id) == (6, 6)
    assert await rig.points(other.member_id) == (0, 0)


async def test_an_older_collector_gets_an_ack_per_batch(rig: Rig) -> None:
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    gateway, channel, _ = await rig.serve()
    async with channel:
        batches = [batch(scope, s, range(3 * s, 3 * s + 3)) for s in range(1, 5)]
        acks, status = await held_window(rig, gateway, channel, token, batches, cumulative=False)
    assert status is None
    assert [(a.seq, a.accepted) for a in acks] == [(1, 3), (2, 3), (3, 3), (4, 3)]
    assert gateway.rounds == []  # the path of an ack a batch
    assert await rig.points(scope.member_id) == (12, 12)


@pytest.mark.parametrize("kind", [Watched, Older], ids=["gateway", "older gateway"])
async def test_the_shipper_stores_everything_once(
    tmp_path: Path, rig: Rig, kind: type[Watched]
) -> None:
    """The collector's shipper (4 batches in flight, cumulative acks asked) against the gateway
    while its store is slow, and against a gateway that acks every batch."""
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    gateway, channel, port = await rig.serve(kind)
    channel.close()
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(2000))
    async with shipping(tmp_path, rig, port, scope, token) as (spool, shipper):
        rig.gated.gate.clear()
        await until(lambda: rig.gated.waiting == 1)
        if kind is Watched:  # the shipper's four batches in flight: in the round or read ahead

            def arrived() -> int:
                queued = len(gateway.ahead.queue) if gateway.ahead is not None else 0
                return sum(len(r) for r in gateway.rounds) + queued

            await until(lambda: arrived() == 4)
        rig.gated.gate.set()
        await until(lambda: spool.pending(scope.member_id) == 0)
    assert shipper.shipped == points
    assert await rig.points(scope.member_id) == (points, points // 5)
    if kind is Watched:
        assert max(len(r) for r in gateway.rounds) > 1  # batches stored together


async def test_a_connection_cut_between_commit_and_ack_loses_and_doubles_nothing(
    tmp_path: Path, rig: Rig
) -> None:
    """Rounds committed but never acknowledged (as when a gateway is killed after a commit):
    the shipper resends them on a new stream, the watermark cuts them, each point once."""
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    _, channel, port = await rig.serve()
    channel.close()
    proxy = Proxy(port)
    await proxy.start()
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(2000))

    def cut() -> None:  # every relayed connection, at once: the round's ack is never relayed
        for w in proxy.writers:
            w.transport.abort()
        proxy.writers.clear()

    rig.gated.after_commit = cut
    try:
        async with shipping(tmp_path, rig, proxy.port, scope, token) as (spool, shipper):
            await until(lambda: spool.pending(scope.member_id) == 0)
    finally:
        await proxy.down()
    assert rig.gated.after_commit is None  # the cut happened
    assert shipper.shipped == points
    assert await rig.points(scope.member_id) == (points, points // 5)
    duplicates = await rig.pool.fetchval(
        "SELECT duplicates FROM telemetry_members WHERE member_id = $1", scope.member_id
    )
    assert duplicates > 0  # the committed round was sent again and cut by the watermark


async def test_two_gateways_given_the_same_batches_store_each_point_once(rig: Rig) -> None:
    """A collector's resend reaching another gateway while its first stream still runs: both
    streams carry the same batches, in rounds, at once; each point is stored once."""
    scope = rig.scopes[0]
    token = await rig.tokens.issue(scope, T0, DAY)
    _, first, _ = await rig.serve()
    _, second, _ = await rig.serve()
    batches = [batch(scope, s, range(10 * s, 10 * s + 10)) for s in range(1, 41)]
    metadata = {"authorization": f"Bearer {token}", ACKS: CUMULATIVE}

    async def send(channel: Channel) -> list[pb.Ack]:
        async with TelemetryStub(channel).Append.open(metadata=metadata) as stream:
            for b in batches:
                await stream.send_message(b)
            await stream.end()
            acks = []
            while (ack := await stream.recv_message()) is not None:
                acks.append(ack)
            return acks

    async with first, second:
        results = await asyncio.gather(send(first), send(second))
    for acks in results:
        assert acks[-1].seq == 40
        assert [a.seq for a in acks] == sorted({a.seq for a in acks})
    total = [a for acks in results for a in acks]
    assert sum(a.accepted for a in total) == 400
    assert sum(a.duplicates for a in total) == 400
    assert await rig.points(scope.member_id) == (400, 400)


class shipping:
    """A spool, tail and shipper for ``scope``'s member against the gateway at ``port``."""

    def __init__(self, tmp_path: Path, rig: Rig, port: int, scope: MemberScope, token: str):
        self.spool = Spool(tmp_path / "spool", row_points=100)
        self.tail = MemberTail(scope.member_id, tmp_path / "metrics", self.spool)
        self.channel = open_channel("127.0.0.1", port, rig.pki.ca.cert)
        ticket = Ticket(scope.attempt_id, scope.member_id, token)
        self.shipper = Shipper(self.channel, self.spool, ticket, batch_points=500)
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> tuple[Spool, Shipper]:
        self.tail.poll()
        self.task = asyncio.create_task(self.shipper.run())
        return self.spool, self.shipper

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.tail.close()
        self.channel.close()
        self.spool.close()
