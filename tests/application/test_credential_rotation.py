"""Control credentials rotate over the stream: a credential older than ``rotate_every`` gets a
successor (at connect and while connected), the node's acknowledgement starts the grace period
of the old one, and a node that reconnects with its newest credential retires the older ones
even when its acknowledgement was lost."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from application import enrollment
from application.node_control import ControlSettings, NodeControl, Session
from domain.errors import Unauthenticated
from domain.fleet import Pool
from domain.node_messages import CredentialAck, Hello
from domain.node_protocol import NodeCapacity
from tests.support.context import ADMIN, FakeClock, memory_context

pytestmark = pytest.mark.unit

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
CAP = NodeCapacity(0, None, 1.0, 1024)
DAY = timedelta(days=1)
GRACE = timedelta(minutes=10)


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.ctx = memory_context(tmp_path, clock=self.clock, pools=(POOL,), nodes=0)
        self.control = NodeControl(
            self.ctx, "gw", ControlSettings(rotate_every=DAY, rotation_grace=GRACE)
        )

    async def enroll(self, name: str = "n1") -> str:
        secret, _ = await enrollment.create_join_token(self.ctx, ADMIN, POOL.name, name)
        return (await enrollment.enroll(self.ctx, secret, name, CAP, "10.0.0.1")).credential

    async def connect(self, credential: str) -> Session:
        identity = await enrollment.authenticate_node(self.ctx, credential)
        hello = Hello(identity.node, CAP, "10.0.0.1", "test", 0, ())
        session = await self.control.open(identity, hello)
        session.last_seq = 1
        return session

    async def refused(self, credential: str) -> bool:
        try:
            await enrollment.authenticate_node(self.ctx, credential)
        except Unauthenticated:
            return True
        return False


@pytest.fixture
async def world(tmp_path: Path) -> World:
    return World(tmp_path)


async def test_a_young_credential_is_not_rotated(world: World) -> None:
    session = await world.connect(await world.enroll())
    assert session.rotation is None
    world.clock.advance(seconds=DAY.total_seconds() - 1)
    assert await world.control.rotations([session]) == []


async def test_a_connected_node_gets_a_new_credential_and_the_old_one_ends_after_the_grace(
    world: World,
) -> None:
    old = await world.enroll()
    session = await world.connect(old)
    world.clock.advance(seconds=DAY.total_seconds())
    [(to, rotation)] = await world.control.rotations([session])
    assert to is session and rotation.credential.startswith("tpn_")
    assert await world.control.rotations([session]) == []  # one in flight at a time
    assert not await world.refused(old)  # nothing changes before the node stored it
    assert await world.control.handle(session, 2, CredentialAck(rotation.credential_id)) is None
    world.clock.advance(seconds=GRACE.total_seconds() - 1)
    assert not await world.refused(old)  # the grace period: streams in flight keep working
    world.clock.advance(seconds=1)
    assert await world.refused(old)
    assert not await world.refused(rotation.credential)
    # the age is now the new credential's: no rotation until it is a day old
    world.clock.advance(seconds=DAY.total_seconds() - GRACE.total_seconds() - 1)
    assert await world.control.rotations([session]) == []
    world.clock.advance(seconds=1)
    assert len(await world.control.rotations([session])) == 1


async def test_an_old_credential_is_rotated_at_connect(world: World) -> None:
    old = await world.enroll()
    world.clock.advance(seconds=DAY.total_seconds() + 5)
    session = await world.connect(old)
    assert session.rotation is not None  # the gateway sends it right after Welcome


async def test_an_acknowledgement_for_another_credential_is_refused(world: World) -> None:
    session = await world.connect(await world.enroll())
    why = await world.control.handle(session, 2, CredentialAck("cred-nope"))
    assert why is not None and "no rotation" in why


async def test_a_lost_acknowledgement_is_made_up_for_at_the_next_connect(world: World) -> None:
    old = await world.enroll()
    session = await world.connect(old)
    world.clock.advance(seconds=DAY.total_seconds())
    [(_, rotation)] = await world.control.rotations([session])
    await world.control.close(session)  # the stream ends before the node's ack arrives
    await world.connect(rotation.credential)  # the node stored it: it connects with it
    world.clock.advance(seconds=GRACE.total_seconds())
    assert await world.refused(old)
    assert not await world.refused(rotation.credential)


async def test_a_node_that_never_stored_the_new_credential_keeps_its_old_one(
    world: World,
) -> None:
    old = await world.enroll()
    session = await world.connect(old)
    world.clock.advance(seconds=DAY.total_seconds())
    await world.control.rotations([session])
    await world.control.close(session)
    world.clock.advance(seconds=3600)
    again = await world.connect(old)  # it lost the new one: the old one still works
    assert again.rotation is not None  # and it is offered another


async def test_the_gateways_pass_rotates_each_credential_once_it_is_due_and_not_before(
    world: World,
) -> None:
    """``rotations_due``: the sessions are looked at only once the earliest credential is due."""
    first = await world.connect(await world.enroll("n1"))
    world.clock.advance(seconds=3600)
    second = await world.connect(await world.enroll("n2"))
    live = {"n1": first, "n2": second}
    world.clock.advance(seconds=DAY.total_seconds() - 3600 - 1)
    assert await world.control.rotations_due(live) == []
    world.clock.advance(seconds=1)
    [(to, rotation)] = await world.control.rotations_due(live)
    assert to is first
    assert await world.control.rotations_due(live) == []  # the second is not due yet
    assert await world.control.handle(first, 2, CredentialAck(rotation.credential_id)) is None
    world.clock.advance(seconds=3600)
    [(to, _)] = await world.control.rotations_due(live)
    assert to is second
    # the acknowledged one is due a day after its new credential, not before
    world.clock.advance(seconds=DAY.total_seconds() - 3600 - 1)
    assert await world.control.rotations_due(live) == []
    world.clock.advance(seconds=1)
    [(to, _)] = await world.control.rotations_due(live)
    assert to is first
