"""The collector's shipping client against a recording Telemetry server over real gRPC and TLS on
loopback: everything arrives, a dropped stream is resent with the same (source, offset) records,
records leave the spool only after their ack, a refused token stops its member without spinning,
counters arrive; and the whole collector from a members directory to the drained marker.

The recording server stands in for the gateway only to drive the client's retry logic; the
real gateway's end-to-end tests live in tests/e2e/test_telemetry_faults.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from grpclib import GRPCError, Status
from grpclib.server import Server, Stream

from adapters.grpc.errors import bearer
from adapters.grpc.telemetry_client import Shipper, Ticket, open_channel
from adapters.grpc.telemetry_gateway import source_batch
from adapters.telemetry.columns import Points
from adapters.telemetry.spool import Spool
from adapters.telemetry.tailer import MemberTail
from adapters.tls import DevPki, ensure_dev_pki, server_context
from domain.errors import InvalidInput
from entrypoints.collector import Collector, CollectorOptions, read_member_file
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryBase, TelemetryStub
from tests.fixtures.server import free_port

pytestmark = pytest.mark.integration

TAGS = ("train/loss", "train/reward", "lr", "grad_norm", "tokens")


def offsets(message: pb.SourceBatch) -> list[int]:
    return np.frombuffer(message.offset, "<i8").tolist()


@dataclass
class Recording(TelemetryBase):
    """Acks every batch it accepts, and records it; like the gateway, stores each (member,
    source, offset, tag) once. ``fail``: how many batches to answer with UNAVAILABLE instead
    (before acking); ``deny``: refuse every stream's token; ``gate``: hold acks until set."""

    accepted: list[pb.Batch] = field(default_factory=list)
    failed: list[pb.Batch] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    fail: int = 0
    deny: bool = False
    gate: asyncio.Event | None = None
    delay: float = 0.0  # seconds per batch, as a busy database takes
    seen: set[tuple[str, str, int, str]] = field(default_factory=set)
    duplicates: int = 0

    async def Append(self, stream: Stream[pb.Batch, pb.Ack]) -> None:
        self.tokens.append(bearer(stream.metadata))
        if self.deny:
            raise GRPCError(Status.PERMISSION_DENIED, "this token is refused")
        last = 0
        async for message in stream:
            assert message.seq == last + 1, "seq numbers a stream's batches from 1"
            last = message.seq
            if self.fail:
                self.fail -= 1
                self.failed.append(message)
                raise GRPCError(Status.UNAVAILABLE, "the database went away")
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.delay)
            accepted = duplicates = 0
            for s in message.sources:
                p = source_batch(s).points
                assert isinstance(p, Points)
                for tag, offset in zip(p.tag.tolist(), p.offset.tolist(), strict=True):
                    key = (message.member, s.source, offset, p.tags[tag])
                    if key in self.seen:
                        duplicates += 1
                    else:
                        self.seen.add(key)
                        accepted += 1
            self.duplicates += duplicates
            self.accepted.append(message)
            await stream.send_message(
                pb.Ack(seq=message.seq, accepted=accepted, duplicates=duplicates)
            )

    def points(self, member: str) -> set[tuple[str, int, str]]:
        return {(s, o, t) for m, s, o, t in self.seen if m == member}


@dataclass
class Net:
    pki: DevPki
    port: int
    recording: Recording
    server: Server | None = None

    async def restart(self) -> None:
        await self.stop()
        self.server = Server([self.recording])
        await self.server.start(
            "127.0.0.1", self.port, ssl=server_context(self.pki.server.cert, self.pki.server.key)
        )

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None


@pytest.fixture
async def net(tmp_path: Path) -> AsyncIterator[Net]:
    pki = ensure_dev_pki(tmp_path / "state", ["localhost", "127.0.0.1"])
    n = Net(pki, free_port(), Recording())
    await n.restart()
    try:
        yield n
    finally:
        await n.stop()


async def until(cond: Callable[[], bool], within: float = 30.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > within:
            raise AssertionError(f"not within {within} s")
        await asyncio.sleep(0.02)


def write_lines(path: Path, steps: range, *, corrupt: int = 0) -> int:
    """JSONL lines with every tag per step (and ``corrupt`` bad lines); returns the points."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        for step in steps:
            metrics = {t: step + i / 10 for i, t in enumerate(TAGS)}
            f.write((json.dumps({"step": step, "metrics": metrics}) + "\n").encode())
        f.write(b"garbage\n" * corrupt)
    return len(steps) * len(TAGS)


@dataclass
class Member:
    spool: Spool
    tail: MemberTail
    shipper: Shipper
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.shipper.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def member(tmp_path: Path, net: Net) -> AsyncIterator[Member]:
    spool = Spool(tmp_path / "spool", row_points=250)  # batches of 1,000 points: 4 rows
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    tail = MemberTail("m1", tmp_path / "metrics", spool)
    shipper = Shipper(channel, spool, Ticket("a1", "m1", "token-1"), batch_points=1000)
    m = Member(spool, tail, shipper)
    try:
        yield m
    finally:
        await m.stop()
        tail.close()
        channel.close()
        spool.close()


async def test_everything_arrives_with_counters_in_several_batches_in_flight(
    tmp_path: Path, net: Net, member: Member
) -> None:
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(1500), corrupt=2)
    points += write_lines(tmp_path / "metrics" / "sub" / "b.jsonl", range(300))
    member.tail.poll()
    member.start()
    await until(lambda: member.spool.pending("m1") == 0)
    rec = net.recording
    assert len(rec.points("m1")) == points
    assert rec.duplicates == 0
    assert len(rec.accepted) >= points // 1000
    assert all(len(b.sources[0].step) <= 8 * 1000 for b in rec.accepted)
    assert {b.member for b in rec.accepted} == {"m1"}
    assert {b.attempt for b in rec.accepted} == {"a1"}
    assert rec.tokens == ["token-1"]
    assert rec.accepted[-1].counters.corrupt_records == 2
    assert member.shipper.shipped == points
    sources = {s.source for b in rec.accepted for s in b.sources}
    assert sources == {"a.jsonl#0", "sub/b.jsonl#0"}


async def test_a_failed_stream_is_resent_with_the_same_records(
    tmp_path: Path, net: Net, member: Member
) -> None:
    net.recording.fail = 2
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(600))
    member.tail.poll()
    member.start()
    await until(lambda: member.spool.pending("m1") == 0)
    rec = net.recording
    assert len(rec.points("m1")) == points and rec.duplicates == 0
    failed = {(s.source, o) for b in rec.failed for s in b.sources for o in offsets(s)}
    resent = {(s.source, o) for b in rec.accepted for s in b.sources for o in offsets(s)}
    assert failed and failed <= resent
    assert len(rec.tokens) == 3  # two failed streams, then one that carried everything
    assert member.shipper.failures == 0  # reset by the acks that came back


async def test_records_leave_the_spool_only_when_acknowledged(
    tmp_path: Path, net: Net, member: Member
) -> None:
    net.recording.gate = asyncio.Event()
    write_lines(tmp_path / "metrics" / "a.jsonl", range(1000))
    member.tail.poll()
    spooled = member.spool.pending("m1")
    member.start()
    await asyncio.sleep(0.5)  # batches sent, none acknowledged
    assert member.spool.pending("m1") == spooled
    net.recording.gate.set()
    await until(lambda: member.spool.pending("m1") == 0)


class Proxy:
    """A TCP relay in front of the server that can cut every connection (as a gateway killed
    with SIGKILL does) and refuse new ones for a while."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except OSError:
                pass
            finally:
                w.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_connections_cut_mid_stream_lose_nothing(tmp_path: Path, net: Net) -> None:
    proxy = Proxy(net.port)
    await proxy.start()
    spool = Spool(tmp_path / "spool")
    channel = open_channel("127.0.0.1", proxy.port, net.pki.ca.cert)
    tail = MemberTail("m1", tmp_path / "metrics", spool)
    shipper = Shipper(channel, spool, Ticket("a1", "m1", "t"), batch_points=1000, max_pause=0.5)
    m = Member(spool, tail, shipper)
    try:
        gate = net.recording.gate = asyncio.Event()
        net.recording.delay = 0.05
        points = write_lines(tmp_path / "metrics" / "a.jsonl", range(2000))
        tail.poll()
        m.start()
        await until(lambda: len(net.recording.tokens) == 1)
        await asyncio.sleep(0.2)  # batches in flight, unacknowledged
        await proxy.down()  # every connection cut; new ones refused
        net.recording.gate = None
        gate.set()
        await asyncio.sleep(0.5)
        assert spool.pending("m1") == 2000
        await proxy.start()  # up again, and cut again once some batches were acknowledged
        await until(lambda: spool.pending("m1") < 2000)
        await proxy.down()
        assert spool.pending("m1") > 0
        await proxy.start()
        await until(lambda: spool.pending("m1") == 0)
        assert len(net.recording.points("m1")) == points
        assert shipper.streams >= 3
    finally:
        await m.stop()
        tail.close()
        channel.close()
        spool.close()
        await proxy.down()


async def test_a_gateway_that_stops_answering_is_given_up_after_the_ack_timeout(
    tmp_path: Path, net: Net, member: Member
) -> None:
    gate = net.recording.gate = asyncio.Event()
    member.shipper.timeout = 0.5
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(500))
    member.tail.poll()
    member.start()
    await until(lambda: len(net.recording.tokens) >= 2)  # the first stream timed out
    net.recording.gate = None
    gate.set()
    await until(lambda: member.spool.pending("m1") == 0)
    assert len(net.recording.points("m1")) == points


async def test_a_refused_token_stops_its_member_without_spinning_until_a_new_one(
    tmp_path: Path, net: Net, member: Member
) -> None:
    net.recording.deny = True
    points = write_lines(tmp_path / "metrics" / "a.jsonl", range(100))
    member.tail.poll()
    member.start()
    await until(lambda: member.shipper.refused is not None)
    assert "PERMISSION_DENIED" in (member.shipper.refused or "")
    await asyncio.sleep(1.0)
    assert net.recording.tokens == ["token-1"]  # asked once, not again
    assert member.spool.pending("m1") == 100  # kept for a new token
    net.recording.deny = False
    member.shipper.new_token("token-1")  # the same token again: nothing changes
    await asyncio.sleep(0.3)
    assert len(net.recording.tokens) == 1
    member.shipper.new_token("token-2")
    await until(lambda: member.spool.pending("m1") == 0)
    assert net.recording.tokens == ["token-1", "token-2"]
    assert len(net.recording.points("m1")) == points


async def test_the_certificate_must_name_the_server_name(net: Net) -> None:
    good = open_channel("127.0.0.1", net.port, net.pki.ca.cert, server_name="localhost")
    bad = open_channel("127.0.0.1", net.port, net.pki.ca.cert, server_name="elsewhere.example")
    try:
        async with TelemetryStub(good).Append.open() as stream:
            await stream.send_message(pb.Batch(seq=1, member="m"), end=True)
            assert (await stream.recv_message()) is not None
        with pytest.raises(ssl.SSLCertVerificationError):
            async with TelemetryStub(bad).Append.open() as stream:
                await stream.send_message(pb.Batch(seq=1, member="m"), end=True)
    finally:
        good.close()
        bad.close()


def member_file(members: Path, metrics: Path, name: str, *, ended: bool = False) -> None:
    body = {
        "job": "j1",
        "attempt": "a1",
        "member": name,
        "index": 0,
        "token": f"token-{name}",
        "metrics_dir": str(metrics),
        "ended": ended,
    }
    fd = os.open(members / f"{name}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f)


async def test_the_collector_from_member_files_to_the_drained_marker(
    tmp_path: Path, net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    members = tmp_path / "members"
    members.mkdir()
    metrics = tmp_path / "metrics-m1"
    points = write_lines(metrics / "train.jsonl", range(500))
    with (metrics / "train.jsonl").open("ab") as f:
        f.write(b'{"step": 9999, "tra')  # cut short: counted corrupt once the member ended
    member_file(members, metrics, "m1")
    (members / "broken.json").write_text("{not json")
    options = CollectorOptions(
        tmp_path / "spool", members, f"127.0.0.1:{net.port}", net.pki.ca.cert
    )
    spool = Spool(options.spool)
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    collector = Collector(options, spool, channel)
    try:
        with caplog.at_level(logging.ERROR, "tuneplane.collector"):
            await collector.step()
            await collector.step()
        assert "broken.json" in caplog.text and "is not JSON" in caplog.text
        assert caplog.text.count("broken.json") == 1  # once per version of the file
        await until(lambda: len(net.recording.points("m1")) == points)
        assert not (members / "m1.drained").exists()
        member_file(members, metrics, "m1", ended=True)
        for _ in range(200):
            await collector.step()
            if (members / "m1.drained").exists():
                break
            await asyncio.sleep(0.05)
        assert (members / "m1.drained").exists()
        assert collector.runs == {}
        assert spool.pending("m1") == 0 and spool.sources("m1") == {}
        assert net.recording.accepted[-1].counters.corrupt_records == 1
        assert len(net.recording.points("m1")) == points
        await collector.step()  # the daemon has not removed the files yet: nothing restarts
        assert collector.runs == {}
    finally:
        await collector.close()
        channel.close()
        spool.close()


async def test_an_ended_member_whose_token_is_refused_is_given_up(tmp_path: Path, net: Net) -> None:
    net.recording.deny = True
    members = tmp_path / "members"
    members.mkdir()
    write_lines(tmp_path / "metrics" / "train.jsonl", range(50))
    member_file(members, tmp_path / "metrics", "m1")
    options = CollectorOptions(
        tmp_path / "spool", members, f"127.0.0.1:{net.port}", net.pki.ca.cert
    )
    spool = Spool(options.spool)
    channel = open_channel("127.0.0.1", net.port, net.pki.ca.cert)
    collector = Collector(options, spool, channel)
    try:
        await collector.step()
        await until(lambda: collector.runs["m1"].shipper.refused is not None)
        await collector.step()
        assert "m1" in collector.runs and spool.pending("m1") == 50  # running: kept
        member_file(members, tmp_path / "metrics", "m1", ended=True)
        await collector.step()
        assert (members / "m1.drained").exists()
        assert spool.pending("m1") == 0
    finally:
        await collector.close()
        channel.close()
        spool.close()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("[1, 2]", "is not a JSON object"),
        ('{"job": "j"}', '"attempt" must be a non-empty string'),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "rel",'
            ' "index": 0}',
            "is not an absolute path",
        ),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "/m",'
            ' "index": -1}',
            '"index" must be an integer >= 0',
        ),
        (
            '{"job": "j", "attempt": "a", "member": "m1", "token": "t", "metrics_dir": "/m",'
            ' "index": 0, "ended": "yes"}',
            '"ended" must be true or false',
        ),
        (
            '{"job": "j", "attempt": "a", "member": "../x", "token": "t", "metrics_dir": "/m",'
            ' "index": 0}',
            "but the file is named m1.json",
        ),
    ],
)
def test_a_malformed_member_file_is_named_with_what_is_wrong(
    tmp_path: Path, body: str, complaint: str
) -> None:
    path = tmp_path / "m1.json"
    path.write_text(body)
    with pytest.raises(InvalidInput) as caught:
        read_member_file(path)
    assert str(path) in caught.value.message and complaint in caught.value.message
    assert "node daemon" in caught.value.fix
