"""Heartbeats, as the gateway writes them: one statement per flush for every node, and a node
that the coordinator marked disconnected while its stream was alive (its heartbeats could not be
written for a while) is connected again by the next flush; a closed stream's late heartbeats
revive nothing."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from application import enrollment
from application.node_control import NodeControl, Session
from domain.fleet import Connectivity, Pool
from domain.node_messages import Hello
from domain.node_protocol import NodeCapacity
from tests.support.context import ADMIN, FakeClock, memory_context

pytestmark = pytest.mark.unit

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
CAP = NodeCapacity(0, None, 1.0, 1024)


async def connect(control: NodeControl, name: str) -> Session:
    ctx = control.ctx
    secret, _ = await enrollment.create_join_token(ctx, ADMIN, POOL.name, name)
    done = await enrollment.enroll(ctx, secret, name, CAP, "10.0.0.1")
    identity = await enrollment.authenticate_node(ctx, done.credential)
    return await control.open(identity, Hello(name, CAP, "10.0.0.1", "t", 0, ()))


async def connectivity(control: NodeControl, name: str) -> Connectivity:
    async with control.ctx.uow() as uow:
        node = await uow.fleet.node(name)
    assert node is not None
    return node.connectivity


async def expire(control: NodeControl) -> list[str]:
    async with control.ctx.uow() as uow:
        expired = await uow.links.expire(
            control.ctx.clock.now() - timedelta(seconds=30), control.ctx.clock.now()
        )
        await uow.commit()
    return expired


async def test_a_flush_reconnects_a_node_expired_while_its_stream_lived(tmp_path: Path) -> None:
    clock = FakeClock()
    control = NodeControl(memory_context(tmp_path, clock=clock, pools=(POOL,), nodes=0), "gw")
    a, b = await connect(control, "a"), await connect(control, "b")
    clock.advance(seconds=60)  # the gateway could not write: no heartbeat recorded for a minute
    assert await expire(control) == ["a", "b"]
    control.heartbeat(a)
    control.heartbeat(b)
    await control.close(b)  # b's stream ends: its pending heartbeat is dropped
    assert await control.flush() == 1
    assert await connectivity(control, "a") is Connectivity.CONNECTED
    assert await connectivity(control, "b") is Connectivity.DISCONNECTED
    assert await expire(control) == []  # a's heartbeat is recorded: it stays connected
    assert await control.flush() == 0


async def test_streams_ending_together_are_all_recorded_and_their_beats_dropped(
    tmp_path: Path,
) -> None:
    """Closes that arrive together are written together (application/batched.py): each node
    disconnected, its pending heartbeat dropped, a replaced session's end changes nothing."""
    clock = FakeClock()
    control = NodeControl(memory_context(tmp_path, clock=clock, pools=(POOL,), nodes=0), "gw")
    sessions = [await connect(control, f"n{i}") for i in range(12)]
    for s in sessions[:9] + sessions[10:]:  # n9 has no beat pending
        control.heartbeat(s)
    stale = Session("n11", sessions[11].number - 1, 0, sessions[11].identity)  # an older one
    await asyncio.gather(*(control.close(s) for s in [*sessions[:10], stale]))
    assert [await connectivity(control, f"n{i}") for i in range(12)] == [
        Connectivity.DISCONNECTED
    ] * 10 + [Connectivity.CONNECTED] * 2
    assert await control.flush() == 2  # only the beats of the two nodes still connected
