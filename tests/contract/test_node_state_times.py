"""Contract: when a node's scheduling state and connectivity last changed, and its
connectivity history, kept on every path that moves a node (migration 0029's triggers in
PostgreSQL; ``adapters/memory/node_states.py`` in memory): a session's open and close, an
expiry, a revive, set_node_state (cordon, drain, uncordon, lost)."""

from __future__ import annotations

import pytest

from domain.errors import InvalidInput
from domain.fleet import CONNECTIVITY_KEPT, Connectivity, SchedState
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at
from tests.contract.test_node_ports import node_state, open_link, setup_fleet

pytestmark = pytest.mark.contract

C, D, L = Connectivity.CONNECTED, Connectivity.DISCONNECTED, Connectivity.LOST


async def test_every_transition_is_timed_and_in_the_history(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)  # already connected: no change
    async with uow_factory() as uow:
        assert await uow.links.expire(at(5), at(6)) == ["n-0"]  # silent since 1: disconnected
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.links.revive([("n-0", 1)], at(7)) == ["n-0"]
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.links.close("n-0", 1, at(8))
        await uow.commit()
    await open_link(uow_factory, "n-0", 9)
    async with uow_factory() as uow:  # declared lost: cordoned and lost at once
        lost = await uow.fleet.set_node_state("n-0", SchedState.CORDONED, L, at(10))
        await uow.commit()
    assert (lost.sched_changed_at, lost.connectivity_changed_at) == (at(10), at(10))
    async with uow_factory() as uow:
        back = await uow.fleet.set_node_state("n-0", SchedState.SCHEDULABLE, at=at(11))
        same = await uow.fleet.set_node_state("n-0", SchedState.SCHEDULABLE, at=at(12))
        await uow.commit()
    assert (back.sched_changed_at, back.connectivity_changed_at) == (at(11), at(10))
    assert same.sched_changed_at == at(11)  # no change: the time stays
    node = await node_state(uow_factory, "n-0")
    assert node is not None
    assert (node.sched_changed_at, node.connectivity_changed_at) == (at(11), at(10))

    async with uow_factory() as uow:
        five = (await uow.fleet.connectivity_history(5))["n-0"]
        two = (await uow.fleet.connectivity_history(2))["n-0"]
    assert [(c.at, c.connectivity) for c in five] == [
        (at(10), L), (at(9), C), (at(8), D), (at(7), C), (at(6), D)
    ]  # fmt: skip
    assert two == five[:2]
    async with uow_factory() as uow:
        for bad in (0, CONNECTIVITY_KEPT + 1):
            with pytest.raises(InvalidInput):
                await uow.fleet.connectivity_history(bad)


async def test_a_node_keeps_its_last_changes_only(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        for i in range(CONNECTIVITY_KEPT + 10):
            await uow.fleet.set_node_state("n-1", connectivity=D if i % 2 == 0 else C, at=at(i))
        await uow.commit()
    async with uow_factory() as uow:
        kept = (await uow.fleet.connectivity_history(CONNECTIVITY_KEPT))["n-1"]
    assert len(kept) == CONNECTIVITY_KEPT
    assert kept[0].at == at(CONNECTIVITY_KEPT + 9)  # the newest first
    assert [c.at for c in kept] == sorted((c.at for c in kept), reverse=True)
