"""What a hostile or broken node daemon sends the node gateway, over real gRPC and TLS on
loopback, recorded in a real PostgreSQL: a scripted daemon on the protobuf stubs.

What must hold: an engine's long error (or one with a NUL) in a vote or in a Hello's journal is
recorded cut and cleaned, never refused, and never an "Internal Server Error"; a journal entry
that cannot be read is left out, not the whole Hello; numbers past what the schema holds,
NaN, times past any clock and control characters in names are refused INVALID_ARGUMENT naming
the field, and a refused Hello leaves no live session behind (the daemon, restarted, gets in);
an Enroll with a 100 KB name is refused, not cut off by an HTTP/2 protocol error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from grpclib import GRPCError, Status
from grpclib.client import Channel
from grpclib.server import Server
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.grpc.errors import split_fix
from adapters.grpc.node_codec import INSTANCE_HEADER
from adapters.grpc.node_gateway import NodeGateway
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.tls import client_context, ensure_dev_pki, server_context
from application import enrollment
from application import node_control as node_control_module
from application.context import Context
from application.node_control import NodeControl
from domain.node_ports import MemberLaunch
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlStub
from tests.contract.builders import T0
from tests.contract.test_node_launches import Gang, new_gang
from tests.contract.test_node_ports import CAP, setup_fleet
from tests.fixtures.server import free_port
from tests.support.context import ADMIN, FakeClock, memory_context

pytestmark = pytest.mark.integration

NODE = "n-0"
DIRTY = "create failed: driver said \x00 oops \x1b[31m" + "<p>Access denied by proxy. " * 400


def capacity(**kw: Any) -> pb.Capacity:
    base: dict[str, Any] = {"gpus": 8, "gpu_model": "h200", "cpus": 96.0, "memory_mb": 1_048_576}
    return pb.Capacity(**{**base, **kw})


def a_hello(**kw: Any) -> pb.Hello:
    values: dict[str, Any] = {
        "node_name": NODE,
        "capacity": capacity(),
        "address": "10.0.0.1",
        "daemon_version": "0.1.0",
        "scan": pb.EngineScan(engine="ENGINE-1", complete=True),
    }
    return pb.Hello(**{**values, **kw})


def ref(gang: Gang, index: int, **kw: Any) -> pb.MemberRef:
    values: dict[str, Any] = {
        "attempt_id": gang.attempt.id,
        "member_id": gang.members[index].id,
        "member_index": index,
        "epoch": 1,
    }
    return pb.MemberRef(**{**values, **kw})


@dataclass
class Rig:
    ctx: Context
    credential: str
    ca: Path
    port: int
    gang: Gang
    stack: contextlib.AsyncExitStack

    def channel(self) -> Channel:
        channel = Channel("127.0.0.1", self.port, ssl=client_context(self.ca))
        self.stack.callback(channel.close)
        return channel

    async def connect(self, hello: pb.Hello, instance: str) -> Any:
        """A Connect stream that said ``hello``: its Welcome read (or its refusal raised)."""
        stream = NodeControlStub(self.channel()).Connect.open(
            metadata={"authorization": f"Bearer {self.credential}", INSTANCE_HEADER: instance}
        )
        await stream.__aenter__()
        try:
            await stream.send_message(pb.NodeMessage(seq=1, hello=hello))
            reply = await asyncio.wait_for(stream.recv_message(), 20)
        except Exception as exc:  # as ``async with`` would: a reset stream raises its status
            await stream.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self.stack.push_async_callback(_forget, stream)
        assert reply is not None and reply.WhichOneof("body") == "welcome", reply
        return stream

    async def refusal(self, hello: pb.Hello, instance: str) -> GRPCError:
        with pytest.raises(GRPCError) as info:
            await self.connect(hello, instance)
        return info.value

    async def launches(self) -> list[MemberLaunch]:
        async with self.ctx.uow() as uow:
            return await uow.launches.members(self.gang.attempt.id)

    async def live_session(self) -> bool:
        async with self.ctx.uow() as uow:
            link = await uow.links.get(NODE)
        return link is not None and link.closed_at is None


async def _forget(stream: Any) -> None:
    with contextlib.suppress(Exception):
        await stream.cancel()
    with contextlib.suppress(Exception):
        await stream.__aexit__(None, None, None)


@pytest.fixture
async def rig(tmp_path: Path, pg_engine: AsyncEngine) -> AsyncIterator[Rig]:
    """Pool ``n`` (8 × h200 nodes n-0…n-2) in PostgreSQL, node n-0 enrolled, a two-member gang
    placed on it and its launch begun (undecided), one gateway serving."""

    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(pg_engine)

    await setup_fleet(uow)
    gang = await new_gang(uow, (NODE, NODE))
    ctx = dataclasses.replace(
        memory_context(tmp_path, pools=(), nodes=0), uow=uow, clock=FakeClock(T0)
    )
    secret, _ = await enrollment.create_join_token(ctx, ADMIN, "n", NODE)
    done = await enrollment.enroll(ctx, secret, NODE, CAP, "10.0.0.1")
    pki = ensure_dev_pki(tmp_path / "pki", ["127.0.0.1"])
    # no command loop: what is recorded is what the daemon said (its Prepares would fail here)
    gateway = NodeGateway(NodeControl(ctx, "gw0"), poll=0.05)
    server = Server([gateway])
    port = free_port()
    await server.start("127.0.0.1", port, ssl=server_context(pki.server.cert, pki.server.key))
    async with contextlib.AsyncExitStack() as stack:
        try:
            yield Rig(ctx, done.credential, pki.ca.cert, port, gang, stack)
        finally:
            await stack.aclose()
            server.close()
            await server.wait_closed()


def _cleaned(text: str) -> None:
    assert len(text) <= 4096
    assert text.startswith("create failed: driver said ? oops ?[31m<p>Access denied")
    assert text.endswith(f"… [cut: {len(DIRTY)} characters]")
    assert text.isprintable()


async def test_a_long_engine_error_with_a_nul_is_recorded_cut_and_cleaned_not_refused(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """s12: the journal holds member 0's no vote with the engine's 10 KB error (a NUL in it)
    and an entry that cannot be read (a NUL in its member id); member 1's no vote comes on the
    stream with the same text. Before: the whole Hello refused forever (or an Internal Server
    Error), the vote refused without a log line, the job left launching without a reason."""
    caplog.set_level(logging.WARNING, "tuneplane.gateway")
    unreadable = pb.MemberStatus(
        ref=ref(rig.gang, 1, member_id="mem-\x00x"), phase=pb.RUNNING, at_unix_ms=1
    )
    journal = [
        pb.MemberStatus(ref=ref(rig.gang, 0), phase=pb.REFUSED, reason=DIRTY, at_unix_ms=1),
        unreadable,
    ]
    stream = await rig.connect(a_hello(journal=journal), "a1")
    first, _ = await rig.launches()
    assert first.vote is False
    _cleaned(first.vote_reason)
    lines = [r.getMessage() for r in caplog.records]
    assert any("1 journal entries could not be read" in m and "ref.member_id" in m for m in lines)

    vote = pb.Vote(ref=ref(rig.gang, 1), yes=False, reason=DIRTY)
    await stream.send_message(pb.NodeMessage(seq=2, vote=vote))
    await stream.send_message(pb.NodeMessage(seq=3, heartbeat=pb.Heartbeat(sent_unix_ms=7)))
    reply = await asyncio.wait_for(stream.recv_message(), 20)
    assert reply is not None and reply.WhichOneof("body") == "heartbeat_ack", reply
    _, second = await rig.launches()
    assert second.vote is False
    _cleaned(second.vote_reason)


async def test_a_message_that_cannot_be_read_is_refused_alone_and_logged(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A vote naming a member with a NUL is answered Refused naming the field, logged; the
    stream goes on (its next heartbeat is answered)."""
    caplog.set_level(logging.WARNING, "tuneplane.gateway")
    stream = await rig.connect(a_hello(), "a1")
    vote = pb.Vote(ref=ref(rig.gang, 1, attempt_id="att-\x00"), yes=True)
    await stream.send_message(pb.NodeMessage(seq=2, vote=vote))
    await stream.send_message(pb.NodeMessage(seq=3, heartbeat=pb.Heartbeat(sent_unix_ms=7)))
    refused = await asyncio.wait_for(stream.recv_message(), 20)
    assert refused is not None and refused.WhichOneof("body") == "refused", refused
    assert refused.refused.seq == 2 and "ref.attempt_id" in refused.refused.reason
    ack = await asyncio.wait_for(stream.recv_message(), 20)
    assert ack is not None and ack.WhichOneof("body") == "heartbeat_ack", ack
    assert any("message 2 refused" in r.getMessage() for r in caplog.records)
    assert [m.vote for m in await rig.launches()] == [None, None]


def _mutate(**kw: Any) -> Callable[[pb.Hello], None]:
    def mutate(hello: pb.Hello) -> None:
        for key, value in kw.items():
            if key.startswith("cap_"):
                setattr(hello.capacity, key[4:], value)
            else:
                setattr(hello, key, value)

    return mutate


def _inventory(memory_mb: int = 1, driver: str = "580", index: int = 0) -> Any:
    def mutate(hello: pb.Hello) -> None:
        device = pb.GpuDevice(index=index, uuid="GPU-1", name="H200", memory_mb=memory_mb)
        inventory = pb.GpuInventory(devices=[device], driver=driver, cuda="13", source="nvml")
        hello.capacity.gpu_inventory.CopyFrom(inventory)

    return mutate


HOSTILE_HELLOS = {  # the tester's s10, and what each must name
    "cpus NaN": (_mutate(cap_cpus=float("nan")), "capacity.cpus"),
    "cpus inf": (_mutate(cap_cpus=float("inf")), "capacity.cpus"),
    "gpus 2^32-1": (_mutate(cap_gpus=2**32 - 1), "capacity.gpus"),
    "memory 2^64-1": (_mutate(cap_memory_mb=2**64 - 1), "capacity.memory_mb"),
    "gpu_model NUL": (_mutate(cap_gpu_model="h1\x00\x00"), "capacity.gpu_model"),
    "gpu_model 200 KB": (_mutate(cap_gpu_model="x" * 200_000), "capacity.gpu_model"),
    "inventory memory 2^64-1": (_inventory(memory_mb=2**64 - 1), "memory_mb"),
    "inventory index 2^32-1": (_inventory(index=2**32 - 1), "index"),
    "inventory driver NUL": (_inventory(driver="5\x00"), "gpu_inventory.driver"),
    "address NUL": (_mutate(address="1.2.3.4\x00x"), "advertised address"),
    "version RTL": (_mutate(daemon_version="1.0\u202e"), "daemon version"),
    "epoch 2^64-1": (_mutate(epoch=2**64 - 1), "epoch"),
    "scan.engine NUL": (lambda h: setattr(h.scan, "engine", "E\x00"), "scan.engine"),
}


@pytest.mark.parametrize("case", list(HOSTILE_HELLOS))
async def test_a_hostile_hello_is_refused_naming_the_field_and_opens_no_session(
    rig: Rig, case: str
) -> None:
    """s10: each was an Internal Server Error (a database or datetime exception) that left a
    live session behind (the daemon, restarted, then refused as a second session), or was
    stored and shown by /v1/fleet. Now INVALID_ARGUMENT naming the field, nothing written."""
    mutate, field = HOSTILE_HELLOS[case]
    hello = a_hello()
    mutate(hello)
    error = await rig.refusal(hello, "a1")
    assert error.status is Status.INVALID_ARGUMENT, (error.status, error.message)
    assert field in (error.message or ""), error.message
    assert not await rig.live_session()
    async with rig.ctx.uow() as uow:
        assert await uow.links.get(NODE) is None, "the refused Hello wrote the node's link"
    await rig.connect(a_hello(), "restarted")  # a new daemon process gets in at once


async def test_a_journal_entry_with_a_time_past_any_clock_is_left_out_alone(rig: Rig) -> None:
    """s10 "journal reason NUL + at 2^62": an Internal Server Error (datetime overflow), the
    node never welcomed. Now that entry is left out and the others recorded."""
    journal = [
        pb.MemberStatus(ref=ref(rig.gang, 0), phase=pb.REFUSED, reason="a\x00b", at_unix_ms=2**62),
        pb.MemberStatus(ref=ref(rig.gang, 1), phase=pb.REFUSED, reason="a\x00b", at_unix_ms=1),
    ]
    await rig.connect(a_hello(journal=journal), "a1")
    first, second = await rig.launches()
    assert (first.vote, second.vote, second.vote_reason) == (None, False, "a?b")


async def test_a_hello_that_fails_after_its_session_opened_closes_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails while a Hello is reconciled (here, an injected fault) closes the session
    it opened: before, it stayed live and the restarted daemon was refused as a second one."""

    async def broken(*args: object) -> None:
        raise RuntimeError("injected: reconcile failed")

    monkeypatch.setattr(node_control_module, "reconcile", broken)
    error = await rig.refusal(a_hello(), "a1")
    assert error.status is Status.UNKNOWN
    assert not await rig.live_session()
    monkeypatch.undo()
    await rig.connect(a_hello(), "restarted")


async def test_an_enroll_echoing_a_huge_name_is_refused_with_a_bounded_message(rig: Rig) -> None:
    """s9: a 100 KB node name ended in an HTTP/2 protocol error (the refusal echoed it whole in
    grpc-message); hostile capacities and addresses are refused naming the field."""
    cases: dict[str, tuple[dict[str, Any], str, str]] = {
        "a" * 100_000: ({}, "node name", "not a valid name"),
        "hnan": ({"capacity": capacity(cpus=float("nan"))}, "capacity.cpus", "not a number"),
        "hmem": ({"capacity": capacity(memory_mb=2**64 - 1)}, "capacity.memory_mb", "more than"),
        "haddr": ({"address": "1.2.3.4\x00; rm -rf /"}, "advertised address", "control"),
        "haddr2": ({"address": "a" * 300_000}, "advertised address", "too long"),
    }
    for name, (request, field, what) in cases.items():
        secret, _ = await enrollment.create_join_token(rig.ctx, ADMIN, "n")
        values: dict[str, Any] = {"address": "10.0.0.9", "capacity": capacity(), **request}
        call = pb.EnrollRequest(join_token=secret, node_name=name, **values)
        with pytest.raises(GRPCError) as info:
            await NodeControlStub(rig.channel()).Enroll(call, timeout=20)
        error = info.value
        assert error.status is Status.INVALID_ARGUMENT, (name[:20], error.status, error.message)
        message, fix = split_fix(error.message or "")
        assert field in message and what in message, message
        assert fix and len(error.message or "") <= 2048  # the status's text: a header
    async with rig.ctx.uow() as uow:
        assert {n.name for n in await uow.fleet.nodes()} == {"n-0", "n-1", "n-2"}
