"""Removing nodes and pools through the application (application/fleet_removal.py), over
in-memory adapters: who may, and the profile a pool's removal would leave naming nothing.
The store's rules (work, streams, races) are in tests/contract/test_fleet_removal.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from application import fleet, fleet_removal
from application.context import Context
from application.fleet_config import FleetConfig, PoolConfig, apply_fleet_config
from domain.errors import Conflict, Forbidden, NotFound
from domain.fleet import Pool
from domain.requests import Profile
from tests.application.test_fleet import OPERATOR
from tests.support.context import ALICE, LOCAL_POOL, memory_context

pytestmark = pytest.mark.unit
A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")
B = Pool("b", "main", "local", 8, 96, 1_048_576, "h100")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(LOCAL_POOL, A, B), nodes=1)  # a-0, b-0, local-0


async def test_only_operators_remove_and_the_unknown_is_not_found(ctx: Context) -> None:
    with pytest.raises(Forbidden):
        await fleet_removal.remove_node(ctx, ALICE, "a-0")
    with pytest.raises(Forbidden):
        await fleet_removal.remove_pool(ctx, ALICE, "b")
    with pytest.raises(NotFound, match="nope"):
        await fleet_removal.remove_node(ctx, OPERATOR, "nope")
    with pytest.raises(NotFound, match="nope"):
        await fleet_removal.remove_pool(ctx, OPERATOR, "nope")
    assert (await fleet_removal.remove_node(ctx, OPERATOR, "a-0")).name == "a-0"
    assert {s.pool.name: len(s.nodes) for s in await fleet.list_fleet(ctx)} == {
        "a": 0,
        "b": 1,
        "local": 1,
    }


async def test_a_pool_that_a_profile_alone_names_stays(ctx: Context) -> None:
    await fleet.put_profile(ctx, OPERATOR, Profile("big", "h100:8"))  # only pool b has H100s
    await fleet.put_profile(ctx, OPERATOR, Profile("small", "h200:1"))
    await fleet_removal.remove_node(ctx, OPERATOR, "b-0")
    with pytest.raises(Conflict, match="profile big would name no pool without pool b") as err:
        await fleet_removal.remove_pool(ctx, OPERATOR, "b")
    assert "tp fleet apply" in (err.value.fix or "")
    assert [s.pool.name for s in await fleet.list_fleet(ctx)] == ["local", "a", "b"]  # kept
    await fleet.put_profile(ctx, OPERATOR, Profile("big", "a/h200:8"))
    assert (await fleet_removal.remove_pool(ctx, OPERATOR, "b")).name == "b"
    assert [s.pool.name for s in await fleet.list_fleet(ctx)] == ["local", "a"]
    profiles = {p.name: p.request for p in await fleet.list_profiles(ctx) if p.kind == "named"}
    assert profiles == {"big": "a/h200:8", "small": "h200:1"}


async def test_a_pool_change_that_would_leave_a_profile_naming_nothing_is_refused(
    ctx: Context,
) -> None:
    """The same rule as a removal for every change of pools: a new GPU model (`tp fleet pool
    set`), a replaced pool (PUT), a fleet file applied. A profile that named nothing already
    holds nothing up."""
    await fleet.put_profile(ctx, OPERATOR, Profile("big", "h100:8"))  # only pool b has H100s
    async with ctx.units.fleet() as uow:  # written before profiles were checked
        await uow.fleet.put_profile(Profile("ghost", "a100:8"))
        await uow.commit()
    refused = "profile big would name no pool after this change to pool b"
    b_of_a100s = FleetConfig(pools=(PoolConfig(dataclasses.replace(B, gpu_model="a100")),))
    with pytest.raises(Conflict, match=refused):
        await fleet.update_pool(ctx, OPERATOR, "b", gpu_model="h200")
    with pytest.raises(Conflict, match=refused):
        await fleet.put_pool(ctx, OPERATOR, dataclasses.replace(B, gpu_model="h200"))
    with pytest.raises(Conflict, match="profile big would name no pool after this apply"):
        await apply_fleet_config(ctx, b_of_a100s, OPERATOR)
    assert [p for p in await ctx_pools(ctx) if p.name == "b"] == [B]  # nothing changed
    await fleet.update_pool(ctx, OPERATOR, "b", description="still H100s")  # the rest may
    await apply_fleet_config(ctx, b_of_a100s)  # the server's own file: applied as written
    assert [p.gpu_model for p in await ctx_pools(ctx) if p.name == "b"] == ["a100"]
    # ghost names pool b now; big, which names nothing now, holds nothing up
    with pytest.raises(Conflict, match="profile ghost would name no pool after this change"):
        await fleet.put_pool(ctx, OPERATOR, B)
    await fleet.put_profile(ctx, OPERATOR, Profile("ghost", "a/h200:8"))
    assert await fleet.put_pool(ctx, OPERATOR, B) is False  # replaced


async def ctx_pools(ctx: Context) -> list[Pool]:
    async with ctx.units.fleet() as uow:
        return await uow.fleet.pools()
