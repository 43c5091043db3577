"""Contract: removing nodes and pools (FleetRepository.remove_node / remove_pool,
domain/fleet_removal.py): a node goes with its credentials, link, events and history only
while nothing is reserved on it and no daemon streams for it; a pool only once it has no
nodes, with its checks and join tokens. A refusal changes nothing."""

from __future__ import annotations

import asyncio

import pytest

from domain.errors import Conflict, NotFound
from domain.fleet import Connectivity, Pool
from domain.fleet_check import PoolCheck
from domain.node_events import NodeEvent, NodeEventKind
from domain.requests import Profile, resolve_request
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import at
from tests.contract.test_node_ports import (
    a_credential,
    a_join_token,
    blocked,
    node_state,
    open_link,
    settled,
    setup_fleet,
)
from tests.contract.test_reservations import new_attempt, on, reservation

pytestmark = pytest.mark.contract


async def remove(uow_factory: UnitOfWorkFactory, node: str) -> None:
    async with uow_factory() as uow:
        await uow.fleet.remove_node(node)
        await uow.commit()


async def close_link(uow_factory: UnitOfWorkFactory, node: str, session: int) -> None:
    async with uow_factory() as uow:
        assert await uow.links.close(node, session, at(5))
        await uow.commit()


async def test_a_node_goes_with_its_credentials_link_events_and_history(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)  # pool n (node backend), nodes n-0, n-1, n-2
    async with uow_factory() as uow:
        await uow.enrollment.add_credential(a_credential("c0", "n-0"))
        await uow.enrollment.add_credential(a_credential("c1", "n-1"))
        event = NodeEvent("n-0", NodeEventKind.SESSION_REFUSED, "192.0.2.7", at(1), at(1), 1, "x")
        await uow.node_events.record(event, 50)
        await uow.commit()
    link = await open_link(uow_factory, "n-0")
    await close_link(uow_factory, "n-0", link.session)  # its daemon stopped
    async with uow_factory() as uow:
        removed = await uow.fleet.remove_node("n-0")
        await uow.commit()
    assert (removed.name, removed.pool, removed.connectivity) == (
        "n-0",
        "n",
        Connectivity.DISCONNECTED,
    )
    async with uow_factory() as uow:
        assert [n.name for n in await uow.fleet.nodes()] == ["n-1", "n-2"]
        assert await uow.enrollment.credential("hash-c0") is None  # a copy cannot come back
        assert await uow.enrollment.credentials("n-0") == []
        assert await uow.links.get("n-0") is None
        assert await uow.node_events.of_node("n-0", 10) == []
        assert "n-0" not in await uow.fleet.connectivity_history(10)
        assert await uow.enrollment.credential("hash-c1") is not None  # the others stay
        with pytest.raises(NotFound):  # a daemon's stream under the old name
            await uow.links.open("n-0", "gw-1", link.capacity, "", "", at(6))
    async with uow_factory() as uow:
        with pytest.raises(NotFound, match="n-0"):
            await uow.fleet.remove_node("n-0")


async def test_a_node_with_work_or_a_streaming_daemon_stays(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    link = await open_link(uow_factory, "n-0")
    async with uow_factory() as uow:
        with pytest.raises(Conflict, match="n-0's daemon is connected") as refused:
            await uow.fleet.remove_node("n-0")
    assert "systemctl stop tuneplane-node" in (refused.value.fix or "")
    async with uow_factory() as uow:
        r = reservation(await new_attempt(uow), on("n-1", 0, 1))
        await uow.reservations.reserve(r)
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(Conflict, match="n-1 holds live reservations") as refused:
            await uow.fleet.remove_node("n-1")
    assert "tp fleet node drain n-1" in (refused.value.fix or "")
    async with uow_factory() as uow:  # nothing changed
        assert [n.name for n in await uow.fleet.nodes()] == ["n-0", "n-1", "n-2"]
        assert await uow.reservations.get(r.attempt_id) == r
    await close_link(uow_factory, "n-0", link.session)
    await remove(uow_factory, "n-0")
    async with uow_factory() as uow:  # its work ended, on proof: the reservation released
        assert await uow.reservations.release(r.attempt_id)
        await uow.commit()
    await remove(uow_factory, "n-1")
    assert await node_state(uow_factory, "n-1") is None


async def test_a_removal_and_a_reservation_racing_leave_one_or_the_other(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The removal locks the node's row as ``reserve`` does: whichever comes second sees the
    first committed, so a node is never removed under a reservation."""
    await setup_fleet(uow_factory)

    async def reserve(uow: UnitOfWork) -> None:
        await uow.reservations.reserve(reservation(await new_attempt(uow), on("n-2", 3)))

    results = await settled(uow_factory, lambda uow: uow.fleet.remove_node("n-2"), reserve)
    assert sorted(results) != ["done", "done"] and "done" in results, results
    async with uow_factory() as uow:
        node = await uow.fleet.node("n-2")
        live = await uow.reservations.live()
    assert (node is None, len(live)) == ((True, 0) if results[0] == "done" else (False, 1))


async def test_a_pool_goes_only_without_nodes_with_its_checks_and_join_tokens(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.enrollment.add_join_token(a_join_token("j1"))
        await uow.checks.add(PoolCheck("chk-1", "n", "job-chk-1", ("n-0", "n-1"), at(1)))
        await uow.commit()
    async with uow_factory() as uow:
        with pytest.raises(Conflict, match="pool n has 3 nodes") as refused:
            await uow.fleet.remove_pool("n")
    assert "tp fleet node rm" in (refused.value.fix or "")
    for node in ("n-0", "n-1", "n-2"):
        await remove(uow_factory, node)
    async with uow_factory() as uow:
        removed = await uow.fleet.remove_pool("n")
        await uow.commit()
    assert removed.name == "n" and removed.backend == "node"
    async with uow_factory() as uow:
        assert [p.name for p in await uow.fleet.pools()] == []
        assert await uow.enrollment.join_token("hash-j1") is None
        assert await uow.checks.latest("n") is None
        with pytest.raises(NotFound, match="pool n"):
            await uow.fleet.remove_pool("n")


async def _profile_naming_m(uow: UnitOfWork) -> None:
    """What `put_profile` does: check the request against the held pools, then store it."""
    resolve_request("h100:8", await uow.fleet.held_pools(), "request")
    await uow.fleet.put_profile(Profile("big", "h100:8"))


async def _remove_m(uow: UnitOfWork) -> None:
    """What `tp fleet pool rm m` does: delete, then refuse if a profile names no pool left."""
    await uow.fleet.remove_pool("m")
    left = await uow.fleet.pools()
    for profile in await uow.fleet.profiles():
        resolve_request(profile.request, left, "request")  # InvalidInput rolls it back


@pytest.mark.parametrize("first", ["profile", "removal"])
async def test_a_profile_stored_while_its_only_pool_goes_is_refused_or_keeps_the_pool(
    uow_factory: UnitOfWorkFactory, request: pytest.FixtureRequest, first: str
) -> None:
    """The profile is checked against pools held until it commits (``held_pools``), so a
    removal in between waits and then sees the profile; a removal first keeps the profile's
    check waiting until the pool is gone. Never a profile naming a pool that is gone."""
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.fleet.put_pool(Pool("m", "main", "node", 8, 96, 1_048_576, "h100"))
        await uow.commit()
    steps = (_profile_naming_m, _remove_m) if first == "profile" else (_remove_m, _profile_naming_m)
    async with uow_factory() as uow:
        await steps[0](uow)  # not committed yet
        second = asyncio.create_task(settled(uow_factory, steps[1]))
        await blocked(request, second)
        await uow.commit()
    assert await second == ["InvalidInput"]
    async with uow_factory() as uow:
        pools = [p.name for p in await uow.fleet.pools()]
        profiles = [p.name for p in await uow.fleet.profiles()]
    assert (pools, profiles) == ((["m", "n"], ["big"]) if first == "profile" else (["n"], []))
