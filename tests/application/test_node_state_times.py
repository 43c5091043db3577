"""The times of a node's last scheduling and connectivity changes, and its connectivity
history, through the use cases that move a node (over in-memory adapters, on a fixed clock):
a control session opened and closed, cordon, drain, uncordon, declared lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from application import fleet, reconcile
from domain.fleet import Connectivity, Node, SchedState
from tests.application.test_node_sessions import REAL, World
from tests.support.context import ADMIN

pytestmark = pytest.mark.unit


async def _node(world: World) -> Node:
    async with world.ctx.uow() as uow:
        node = await uow.fleet.node("n1")
    assert node is not None
    return node


async def test_each_transition_stamps_its_time_and_history(tmp_path: Path) -> None:
    world = World(tmp_path)
    await world.enroll()
    clock = world.clock
    session = await world.connect(REAL)  # enrolled disconnected: connect
    first_at = clock.now()
    clock.advance(minutes=1)
    await world.control.close(session)  # disconnect
    closed_at = clock.now()
    assert (await _node(world)).connectivity_changed_at == closed_at
    clock.advance(minutes=1)
    await world.connect(REAL)  # connect
    connected_at = clock.now()
    assert (await _node(world)).connectivity_changed_at == connected_at

    for sched in (SchedState.CORDONED, SchedState.DRAINING, SchedState.SCHEDULABLE):
        clock.advance(minutes=1)
        moved = await fleet.set_node_state(world.ctx, ADMIN, "n1", sched)
        assert (moved.sched, moved.sched_changed_at) == (sched, clock.now())
        assert moved.connectivity_changed_at == connected_at  # untouched

    clock.advance(minutes=1)
    await reconcile.declare_node_lost(world.ctx, ADMIN, "n1", "the host burned")
    lost = await _node(world)
    assert (lost.connectivity, lost.connectivity_changed_at) == (Connectivity.LOST, clock.now())
    assert (lost.sched, lost.sched_changed_at) == (SchedState.CORDONED, clock.now())

    history = (await fleet.connectivity_history(world.ctx, 10))["n1"]
    assert [(c.connectivity, c.at) for c in history] == [
        (Connectivity.LOST, clock.now()),
        (Connectivity.CONNECTED, connected_at),
        (Connectivity.DISCONNECTED, closed_at),
        (Connectivity.CONNECTED, first_at),
    ]
