"""The telemetry gateway over real gRPC and TLS on loopback, with PostgreSQL: the token matrix
(every token against every other scope), expiry, ended attempts, and the two gateways refusing
each other's credentials."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.server import Server
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.collector_tokens import CollectorTokens
from adapters.grpc.node_gateway import NodeGateway
from adapters.grpc.telemetry_gateway import TelemetryGateway
from adapters.grpc.telemetry_gateway import log as gateway_log
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.metrics_pool import create_pool
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.tls import client_context, ensure_dev_pki, server_context
from application import log_context
from application.node_control import ControlSettings, NodeControl
from application.telemetry import STATUS_SECONDS, TelemetryIngest
from domain.errors import Forbidden, Unavailable
from domain.telemetry import MemberScope
from domain.telemetry_ports import CollectorCounters, MemberStatus
from proto import node_control_pb2 as node_pb
from proto import telemetry_pb2 as pb
from proto.node_control_grpc import NodeControlStub
from proto.telemetry_grpc import TelemetryStub
from tests.contract.builders import a_job, a_member, an_attempt
from tests.fixtures.server import free_port
from tests.support.context import FakeClock, memory_context
from tests.support.points import source_batch

pytestmark = pytest.mark.integration

T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)
NONE = CollectorCounters()
DAY = 86400


@dataclass
class Telemetry:
    channel: Channel
    clock: FakeClock
    tokens: CollectorTokens
    keys: PostgresSigningKeys
    store: PostgresMetrics
    scopes: list[MemberScope]
    engine: AsyncEngine
    pki_dir: Path

    async def send(self, token: str, scope: MemberScope, offsets: range = range(3)) -> pb.Ack:
        stub = TelemetryStub(self.channel)
        async with stub.Append.open(metadata={"authorization": f"Bearer {token}"}) as stream:
            await stream.send_message(batch(scope, offsets), end=True)
            ack = await stream.recv_message()
            assert ack is not None
            return ack

    async def written(self) -> tuple[int, int, int, int]:
        q = self.store.pool.fetchval
        return (
            await q("SELECT count(*) FROM metric_points"),
            await q("SELECT count(*) FROM metric_series"),
            await q("SELECT count(*) FROM telemetry_sources"),
            await q("SELECT count(*) FROM telemetry_members"),
        )


def batch(scope: MemberScope, offsets: range) -> pb.Batch:
    return with_columns(
        scope,
        [0] * len(offsets),
        [o * 40 for o in offsets],
        list(offsets),
        [1.7e9 + o for o in offsets],
        [1.0 / (o + 1) for o in offsets],
    )


def with_columns(
    scope: MemberScope,
    tags: list[int],
    offsets: list[int],
    steps: list[int],
    walls: list[float],
    values: list[float],
) -> pb.Batch:
    """A batch of one source whose columns may disagree (for the malformed cases)."""
    source = pb.SourceBatch(
        source="train.jsonl#0",
        kind="jsonl",
        tag_names=["train/loss"],
        tag=np.array(tags, "<u4").tobytes(),
        offset=np.array(offsets, "<i8").tobytes(),
        step=np.array(steps, "<i8").tobytes(),
        wall_time=np.array(walls, "<f8").tobytes(),
        value=np.array(values, "<f8").tobytes(),
    )
    return pb.Batch(seq=1, attempt=scope.attempt_id, member=scope.member_id, sources=[source])


@pytest.fixture
async def telemetry(
    tmp_path: Path, pg_url: str, pg_engine: AsyncEngine
) -> AsyncIterator[Telemetry]:
    """3 jobs × 2 attempts × 4 members, and a gateway serving them."""
    scopes: list[MemberScope] = []
    async with PostgresUnitOfWork(pg_engine) as uow:
        for _ in range(3):
            job = a_job()
            await uow.jobs.add(job)
            for number in (1, 2):
                attempt = an_attempt(job, number)
                await uow.attempts.add(attempt)
                for index in range(4):
                    member = a_member(attempt, index)
                    await uow.members.add(member)
                    scopes.append(MemberScope(job.id, attempt.id, member.id, index))
        await uow.commit()
    pool = await create_pool(pg_url)
    clock = FakeClock(T0)
    keys = PostgresSigningKeys(pool)
    tokens = CollectorTokens(keys)
    store = PostgresMetrics(pool)
    ingest = TelemetryIngest(store, tokens, clock, grace=timedelta(minutes=10))
    pki = ensure_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
    server = Server([TelemetryGateway(ingest)])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    channel = Channel("127.0.0.1", port, ssl=client_context(pki.ca.cert))
    try:
        yield Telemetry(channel, clock, tokens, keys, store, scopes, pg_engine, tmp_path / "pki")
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
        await pool.close()


async def refused(call: object) -> Status:
    with pytest.raises(GRPCError) as info:
        await call  # type: ignore[misc]
    return info.value.status


async def test_every_token_is_refused_for_every_other_scope(telemetry: Telemetry) -> None:
    tokens = [await telemetry.tokens.issue(s, T0, DAY) for s in telemetry.scopes]
    statuses = set()
    for (i, token), (j, scope) in itertools.product(enumerate(tokens), enumerate(telemetry.scopes)):
        if i != j:
            statuses.add(await refused(telemetry.send(token, scope)))
    assert statuses == {Status.PERMISSION_DENIED}
    assert await telemetry.written() == (0, 0, 0, 0)
    # each token is good for its own scope
    for token, scope in zip(tokens, telemetry.scopes, strict=True):
        ack = await telemetry.send(token, scope)
        assert (ack.seq, ack.accepted, ack.duplicates) == (1, 3, 0)
    assert await telemetry.written() == (72, 24, 24, 24)


class Contexts(logging.Handler):
    """The log ids bound when each line was written (the processes' log set-up reads them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[tuple[str, dict[str, str | int]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), log_context.current()))


async def test_a_mixed_batch_for_another_member_writes_nothing(telemetry: Telemetry) -> None:
    own, other = telemetry.scopes[0], telemetry.scopes[1]
    token = await telemetry.tokens.issue(own, T0, DAY)
    contexts = Contexts()
    logging.getLogger(gateway_log.name).addHandler(contexts)
    # the right attempt with another member, and the right member with another attempt
    for scope in (
        MemberScope(own.job_id, own.attempt_id, other.member_id, 1),
        MemberScope(own.job_id, telemetry.scopes[4].attempt_id, own.member_id, 0),
    ):
        assert await refused(telemetry.send(token, scope)) == Status.PERMISSION_DENIED
    assert await telemetry.written() == (0, 0, 0, 0)
    logging.getLogger(gateway_log.name).removeHandler(contexts)
    # each refusal's line names the job and member the token speaks for
    assert [c for m, c in contexts.seen if m.startswith("refused a batch")] == [
        {"job_id": own.job_id, "member": own.member_index}
    ] * 2


async def test_expired_and_post_attempt_tokens_are_refused(telemetry: Telemetry) -> None:
    scope = telemetry.scopes[0]
    token = await telemetry.tokens.issue(scope, T0, 3600)
    assert (await telemetry.send(token, scope)).accepted == 3
    telemetry.clock.advance(seconds=3600)
    assert await refused(telemetry.send(token, scope)) == Status.UNAUTHENTICATED
    # a fresh token works until the attempt has ended for longer than the grace
    fresh = await telemetry.tokens.issue(scope, telemetry.clock.now(), DAY)
    ended = telemetry.clock.now()
    await telemetry.store.pool.execute(
        "UPDATE attempts SET state = 'succeeded', updated_at = $2 WHERE id = $1",
        scope.attempt_id,
        ended,
    )
    telemetry.clock.advance(minutes=9)
    ack = await telemetry.send(fresh, scope, range(3, 6))  # the last lines, within the grace
    assert ack.accepted == 3
    telemetry.clock.advance(minutes=2)
    assert await refused(telemetry.send(fresh, scope, range(6, 9))) == Status.PERMISSION_DENIED
    assert (await telemetry.written())[0] == 6


class CountingStore(PostgresMetrics):
    """The real store, counting its member status reads."""

    reads = 0

    async def member_status(self, member_id: str) -> MemberStatus | None:
        self.reads += 1
        return await super().member_status(member_id)


async def test_a_running_members_status_is_read_once_per_interval_not_per_batch(
    telemetry: Telemetry,
) -> None:
    scope = telemetry.scopes[0]
    store = CountingStore(telemetry.store.pool)
    clock = telemetry.clock
    ingest = TelemetryIngest(store, telemetry.tokens, clock, grace=timedelta(minutes=10))
    claims = await ingest.authenticate(await telemetry.tokens.issue(scope, clock.now(), DAY))

    async def send(first: int) -> int:
        batch = source_batch("m.jsonl#0", "jsonl", ["x"], [first], [first], [1.0], [2.0])
        got = await ingest.append(claims, scope.attempt_id, scope.member_id, [batch], NONE)
        return got.accepted

    assert [await send(i) for i in range(5)] == [1] * 5
    assert store.reads == 1
    clock.advance(seconds=STATUS_SECONDS)  # read again once the interval passed
    assert await send(5) == 1 and store.reads == 2
    # an ended attempt's status is read every time, and refused past the grace
    await store.pool.execute(
        "UPDATE attempts SET state = 'succeeded', updated_at = $2 WHERE id = $1",
        scope.attempt_id,
        clock.now(),
    )
    clock.advance(seconds=STATUS_SECONDS)
    assert await send(6) == 1 and store.reads == 3
    assert await send(7) == 1 and store.reads == 4
    clock.advance(minutes=11)
    with pytest.raises(Forbidden):
        await send(8)


async def test_forged_and_foreign_credentials_are_refused(telemetry: Telemetry) -> None:
    scope = telemetry.scopes[0]
    token = await telemetry.tokens.issue(scope, T0, DAY)
    header, _claims, signature = token.split(".")
    other = await telemetry.tokens.issue(telemetry.scopes[1], T0, DAY)
    forged = ".".join((header, other.split(".")[1], signature))  # another scope, old signature
    for bad in ("", "tpn_" + "a" * 43, "not-a-jwt", forged, token[:-4] + "AAAA"):
        assert await refused(telemetry.send(bad, scope)) == Status.UNAUTHENTICATED, bad
    # a key that was never stored (another installation's) signs nothing valid here
    alien = CollectorTokens(PostgresSigningKeys(telemetry.store.pool, purpose="elsewhere"))
    alien_token = await alien.issue(scope, T0, DAY)
    assert await refused(telemetry.send(alien_token, scope)) == Status.UNAUTHENTICATED
    assert await telemetry.written() == (0, 0, 0, 0)


async def test_a_rotated_key_still_verifies_its_tokens(telemetry: Telemetry) -> None:
    scope = telemetry.scopes[0]
    old = await telemetry.tokens.issue(scope, T0, DAY)
    kid, _ = await telemetry.keys.rotate(T0 + timedelta(seconds=1))
    new = await telemetry.tokens.issue(scope, T0 + timedelta(seconds=2), DAY)
    assert old.split(".")[0] != new.split(".")[0]  # another kid in the header
    assert (await telemetry.send(old, scope, range(0, 2))).accepted == 2
    assert (await telemetry.send(new, scope, range(2, 4))).accepted == 2
    current, _ = await telemetry.keys.current(T0 + timedelta(seconds=3))
    assert current == kid


async def test_the_node_gateway_refuses_a_collector_token(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    ctx = memory_context(tmp_path)
    gateway = NodeGateway(NodeControl(ctx, "gw", ControlSettings()))
    pki = ensure_dev_pki(telemetry.pki_dir, ["localhost", "127.0.0.1"])
    server = Server([gateway])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    channel = Channel("127.0.0.1", port, ssl=client_context(pki.ca.cert))
    token = await telemetry.tokens.issue(telemetry.scopes[0], T0, DAY)
    try:
        stub = NodeControlStub(channel)
        async with stub.Connect.open(metadata={"authorization": f"Bearer {token}"}) as stream:
            await stream.send_message(node_pb.NodeMessage(seq=1), end=True)
            assert await refused(stream.recv_message()) == Status.UNAUTHENTICATED
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


async def test_malformed_batches_are_refused_and_write_nothing(telemetry: Telemetry) -> None:
    scope = telemetry.scopes[0]
    token = await telemetry.tokens.issue(scope, T0, DAY)
    stub = TelemetryStub(telemetry.channel)
    bad_batches = []
    mutations = ("columns", "ragged", "backwards", "tag index", "kind", "step", "offset", "nul")
    for mutate in (*mutations, "control"):
        tags, offsets, steps = [0, 0, 0], [0, 40, 80], [0, 1, 2]  # a good batch, then mutated
        walls, values = [1.0, 2.0, 3.0], [0.5, 0.25, 0.125]
        if mutate == "columns":
            values.append(1.0)
        elif mutate == "backwards":
            offsets[2] = 0
        elif mutate == "tag index":
            tags[1] = 7
        elif mutate == "step":
            steps[0] = -1
        elif mutate == "offset":
            offsets[0] = -40
        b = with_columns(scope, tags, offsets, steps, walls, values)
        if mutate == "kind":
            b.sources[0].kind = "csv"
        elif mutate == "ragged":
            b.sources[0].step = b.sources[0].step[:-3]  # not a whole number of int64
        elif mutate == "nul":  # PostgreSQL's text cannot hold it: was an internal error
            b.sources[0].tag_names[0] = "bad\x00tag"
        elif mutate == "control":
            b.sources[0].tag_names[0] = "bad\x1btag"
        bad_batches.append(b)
    for b in bad_batches:
        async with stub.Append.open(metadata={"authorization": f"Bearer {token}"}) as stream:
            await stream.send_message(b, end=True)
            assert await refused(stream.recv_message()) == Status.INVALID_ARGUMENT
    assert await telemetry.written() == (0, 0, 0, 0)
    # and a stream whose seq does not increase is cut off after its first batch (the status
    # comes in the trailers, after the first batch's ack)
    with pytest.raises(GRPCError) as info:
        async with stub.Append.open(metadata={"authorization": f"Bearer {token}"}) as stream:
            await stream.send_message(batch(scope, range(3)))
            ack = await stream.recv_message()
            assert ack is not None and ack.accepted == 3
            await stream.send_message(batch(scope, range(3, 6)), end=True)  # seq 1 again
            assert await stream.recv_message() is None
    assert info.value.status == Status.INVALID_ARGUMENT
    assert (await telemetry.written())[0] == 3


async def test_gateways_share_a_port_only_when_told_to(tmp_path: Path) -> None:
    """TUNEPLANE_TELEMETRY_GATEWAY_SHARE_PORT: several processes listen on one port
    (SO_REUSEPORT); without it, a second gateway on a port in use is refused, as before."""
    from entrypoints.gateway import _listen

    pki = ensure_dev_pki(tmp_path / "pki", ["localhost", "127.0.0.1"])
    tls = server_context(pki.server.cert, pki.server.key)
    port = free_port()
    servers = [Server([]) for _ in range(3)]
    try:
        await _listen(servers[0], "127.0.0.1", port, tls, "telemetry", share=True)
        await _listen(servers[1], "127.0.0.1", port, tls, "telemetry", share=True)
        with pytest.raises(Unavailable, match=f"cannot listen on 127.0.0.1:{port}"):
            await _listen(servers[2], "127.0.0.1", port, tls, "telemetry")
    finally:
        for server in servers[:2]:
            server.close()
            await server.wait_closed()
