"""One control session per node (application/node_sessions.py), through the gateway's use case
``NodeControl.open``: a second stream of a node whose session is alive is refused, changes
nothing and is recorded (coalesced) as a security event; the same daemon process, a closed
stream, or heartbeats older than the session timeout let a new session in; the flush names
sessions that a newer one replaced elsewhere."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from application import enrollment
from application.node_control import ControlSettings, NodeControl, Session
from application.node_sessions import Caller, SessionRefused, node_events
from domain.errors import Forbidden, InvalidInput, NotFound
from domain.fleet import Pool
from domain.node_events import NodeEventKind, event
from domain.node_messages import Hello
from domain.node_ports import NodeLink
from domain.node_protocol import NodeCapacity
from tests.support.context import ADMIN, ALICE, FakeClock, memory_context

pytestmark = pytest.mark.unit

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
CAP = NodeCapacity(0, None, 1.0, 1024)
TIMEOUT = timedelta(seconds=30)
REAL = Caller("192.0.2.10", "a" * 32)
COPY = Caller("198.51.100.66", "b" * 32)


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.ctx = memory_context(tmp_path, clock=self.clock, pools=(POOL,), nodes=0)
        self.control = NodeControl(self.ctx, "gw", ControlSettings(session_timeout=TIMEOUT))

    async def enroll(self, name: str = "n1") -> None:
        secret, _ = await enrollment.create_join_token(self.ctx, ADMIN, POOL.name, name)
        done = await enrollment.enroll(self.ctx, secret, name, CAP, "10.0.0.1")
        self.identity = await enrollment.authenticate_node(self.ctx, done.credential)

    async def connect(
        self, caller: Caller, address: str = "10.0.0.1", capacity: NodeCapacity = CAP
    ) -> Session:
        hello = Hello("n1", capacity, address, "1.0", 0, ())
        return await self.control.open(self.identity, hello, caller)

    async def link(self) -> NodeLink:
        async with self.ctx.uow() as uow:
            found = await uow.links.get("n1")
        assert found is not None
        return found

    async def beat(self, session: Session) -> None:
        self.control.heartbeat(session)
        await self.control.flush()


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.enroll()
    return w


async def test_a_second_session_while_one_is_alive_is_refused_and_recorded(world: World) -> None:
    real = await world.connect(REAL)
    before = await world.link()
    for _ in range(5):  # a copied credential, retrying
        world.clock.advance(seconds=10)
        await world.beat(real)
        with pytest.raises(SessionRefused) as refused:
            await world.connect(COPY, "10.66.66.66", NodeCapacity(8, "h200", 64.0, 1 << 20))
    text = str(refused.value)
    since = T.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"node n1 already has a live control session, since {since}" in text
    assert "from 192.0.2.10 (advertised address 10.0.0.1" in text
    assert "stop the other daemon" in refused.value.fix
    assert "tp node token create --pool nodes --name n1" in refused.value.fix
    after = await world.link()  # address, capacity, version, session: untouched
    assert replace(after, heartbeat_at=before.heartbeat_at) == before
    [recorded] = await node_events(world.ctx, ADMIN, "n1")
    assert recorded.kind is NodeEventKind.SESSION_REFUSED and recorded.count == 5
    assert recorded.source == "198.51.100.66"
    assert "advertising 10.66.66.66" in recorded.message
    assert "session 1 from 192.0.2.10" in recorded.message


async def test_the_same_daemon_replaces_its_own_session_at_once(world: World) -> None:
    """It gave up its old stream (it saw it die before the gateway did)."""
    first = await world.connect(REAL)
    second = await world.connect(REAL, "10.0.0.2")
    assert second.number == first.number + 1
    assert (await world.link()).address == "10.0.0.2"
    assert await node_events(world.ctx, ADMIN, "n1") == []


async def test_no_instance_is_never_the_same_daemon(world: World) -> None:
    await world.connect(Caller("192.0.2.10", ""))
    with pytest.raises(SessionRefused):
        await world.connect(Caller("192.0.2.10", ""))


async def test_a_closed_session_lets_the_next_one_in(world: World) -> None:
    real = await world.connect(REAL)
    await world.control.close(real)
    successor = await world.connect(COPY, "10.0.0.3")
    assert successor.number == real.number + 1


async def test_a_session_silent_for_the_timeout_is_dead(world: World) -> None:
    """Its gateway died without closing it: heartbeats stop being recorded."""
    real = await world.connect(REAL)
    world.clock.advance(seconds=20)
    await world.beat(real)
    world.clock.advance(seconds=29)  # 29 s after the last recorded heartbeat: still alive
    with pytest.raises(SessionRefused):
        await world.connect(COPY)
    world.clock.advance(seconds=1)
    successor = await world.connect(COPY, "10.0.0.4")
    assert successor.number == real.number + 1
    # the old stream's gateway, still alive, learns at its next flush that it was replaced
    await world.beat(real)
    assert world.control.superseded == {("n1", real.number)}


@pytest.mark.parametrize(
    ("address", "version"),
    [("10.0.0.1\x00", "1.0"), ("", "1.0"), ("a b", "1.0"), ("x" * 254, "1.0"), ("h", "v\n")],
)
async def test_what_no_daemon_sends_is_refused_before_anything_is_written(
    world: World, address: str, version: str
) -> None:
    with pytest.raises(InvalidInput):
        await world.control.open(world.identity, Hello("n1", CAP, address, version, 0, ()))
    async with world.ctx.uow() as uow:
        assert await uow.links.get("n1") is None


async def test_events_are_for_operators_and_known_nodes(world: World) -> None:
    with pytest.raises(Forbidden):
        await node_events(world.ctx, ALICE, "n1")
    with pytest.raises(NotFound):
        await node_events(world.ctx, ADMIN, "missing")
    for bad in ("n1\x00", "x" * 300, ""):
        with pytest.raises(InvalidInput):
            await node_events(world.ctx, ADMIN, bad)


def test_event_texts_are_printable_and_bounded() -> None:
    e = event("n1", NodeEventKind.SESSION_REFUSED, "a\x00b" * 100, T, "x\x00\ny" + "z" * 5000)
    assert e.source.startswith("a?b") and len(e.source) == 100 and e.source.endswith("…")
    assert e.message.startswith("x??y") and len(e.message) == 2000
    assert "\x00" not in e.source + e.message


T = FakeClock().now()


async def test_enrolling_the_node_again_ends_the_session_of_its_old_credential(
    world: World,
) -> None:
    """The copy got in first (the real daemon was down): the operator enrolls the node again;
    the real daemon, with its new credential, gets in at once; the copy's stream is replaced
    (its gateway learns it at the next flush) and its credential is refused."""
    old = world.identity
    copy = await world.connect(COPY, "10.66.66.66")
    await world.enroll()  # a new join token: every older credential stops working
    real = await world.connect(REAL)
    assert real.number == copy.number + 1
    assert (await world.link()).address == "10.0.0.1"
    await world.beat(copy)
    assert world.control.superseded == {("n1", copy.number)}
    async with world.ctx.uow() as uow:
        [cred] = [c for c in await uow.enrollment.credentials("n1") if c.id == old.credential_id]
    assert not cred.valid(world.clock.now())
