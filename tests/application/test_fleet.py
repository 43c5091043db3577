"""Pools, nodes, profiles and the fleet listing, over in-memory adapters."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from application import fleet, reconcile, submissions
from application.context import Context
from application.fleet_config import FleetConfig, PoolConfig, apply_fleet_config
from application.scheduler import Scheduler
from domain.auth import Principal, Role
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.fleet import Connectivity, Node, Pool, SchedState
from domain.node_protocol import NodeCapacity
from domain.requests import Profile
from tests.support.context import ADMIN, ALICE, LOCAL_POOL, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.unit
OPERATOR = Principal("olga", Role.OPERATOR)
A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(LOCAL_POOL, A))


async def test_pools_are_checked_and_changed_by_operators(ctx: Context) -> None:
    b = Pool("b", "main", "node", 8, 64, 524_288, "h100")
    with pytest.raises(Forbidden):
        await fleet.add_pool(ctx, ALICE, b)
    for bad, field in (
        (Pool("b", "main", "node", 8, 64, 1024, None), "gpu_model"),
        (Pool("b", "main", "mainframe", 0, 64, 1024), "backend"),
        (Pool("B", "main", "node", 0, 64, 1024), "name"),
        (Pool("b", "main", "node", 0, 0, 1024), "cpus_per_node"),
        (Pool("b", "main", "node", 0, 4, 1024, description="x\x00"), "description"),
    ):
        with pytest.raises(InvalidInput) as err:
            await fleet.add_pool(ctx, OPERATOR, bad)
        assert err.value.field == field
    await fleet.add_pool(ctx, OPERATOR, b)
    with pytest.raises(Conflict):
        await fleet.add_pool(ctx, OPERATOR, b)
    changed = await fleet.update_pool(ctx, OPERATOR, "b", cpus_per_node=32.0, description="x")
    assert (changed.cpus_per_node, changed.gpus_per_node, changed.description) == (32.0, 8, "x")
    with pytest.raises(InvalidInput):  # a CPU pool must drop its GPU model
        await fleet.update_pool(ctx, OPERATOR, "b", gpus_per_node=0)
    cpu = await fleet.update_pool(ctx, OPERATOR, "b", gpus_per_node=0, gpu_model=None)
    assert not cpu.is_gpu
    with pytest.raises(NotFound):
        await fleet.update_pool(ctx, OPERATOR, "nope", cpus_per_node=1.0)
    assert await fleet.put_pool(ctx, ADMIN, Pool("c", "x", "slurm", 0, 2, 2048)) is True
    assert await fleet.put_pool(ctx, ADMIN, Pool("c", "x", "slurm", 0, 4, 2048)) is False


async def test_nodes_added_moved_and_cordoned(ctx: Context) -> None:
    with pytest.raises(NotFound) as err:
        await fleet.add_node(ctx, OPERATOR, "z-0", "nope")
    assert err.value.field == "pool" and "a, local" in err.value.fix
    node = await fleet.add_node(ctx, OPERATOR, "a-9", "a")
    assert node == Node("a-9", "a")
    with pytest.raises(Conflict):
        await fleet.add_node(ctx, OPERATOR, "a-9", "a")
    for sched in (SchedState.CORDONED, SchedState.DRAINING, SchedState.SCHEDULABLE):
        assert (await fleet.set_node_state(ctx, OPERATOR, "a-9", sched)).sched is sched
    with pytest.raises(Forbidden):
        await fleet.set_node_state(ctx, ALICE, "a-9", SchedState.CORDONED)
    with pytest.raises(NotFound):
        await fleet.set_node_state(ctx, OPERATOR, "nope", SchedState.CORDONED)
    async with ctx.uow() as uow:  # lost contact: a separate field, kept through a move
        await uow.fleet.set_node_state("a-9", SchedState.CORDONED, Connectivity.DISCONNECTED)
        await uow.commit()
    moved = await fleet.put_node(ctx, OPERATOR, "a-9", "local")
    assert moved == Node("a-9", "local", SchedState.CORDONED, Connectivity.DISCONNECTED)
    uncordoned = await fleet.set_node_state(ctx, OPERATOR, "a-9", SchedState.SCHEDULABLE)
    assert uncordoned.connectivity is Connectivity.DISCONNECTED


async def test_a_node_added_to_a_node_pool_waits_for_its_daemon(tmp_path: Path) -> None:
    # a node of the node backend is there to run work only once its daemon says so: added by
    # hand (API, CLI, a fleet file) with no daemon behind it, it takes none
    b = Pool("b", "main", "node", 8, 64, 524_288, "h100")
    ctx = memory_context(tmp_path, pools=(LOCAL_POOL, A, b))
    added = await fleet.add_node(ctx, OPERATOR, "new-0", "b")
    put = await fleet.put_node(ctx, OPERATOR, "new-1", "b")
    await apply_fleet_config(ctx, FleetConfig(pools=(PoolConfig(b, ("new-2",)),)), OPERATOR)
    async with ctx.uow() as uow:
        stored = [await uow.fleet.node(f"new-{i}") for i in range(3)]
    for node in (added, put, *stored):
        assert node is not None and node.connectivity is Connectivity.DISCONNECTED, node
        assert not node.eligible and node.why_not == "disconnected"
    assert (await fleet.add_node(ctx, OPERATOR, "a-8", "a")).eligible  # the local backend: here
    async with ctx.units.nodes() as uow:  # its daemon's session opens: now it takes work
        await uow.links.open(
            "new-0", "gw", NodeCapacity(8, "h100", 64, 524_288), "a", "1", ctx.clock.now()
        )
        await uow.commit()
    async with ctx.uow() as uow:
        node = await uow.fleet.node("new-0")
    assert node is not None and node.eligible


async def test_fleet_listing_shows_states_and_usage(ctx: Context) -> None:
    await fleet.set_node_state(ctx, OPERATOR, "a-2", SchedState.CORDONED)
    intent = an_intent(profiles=("h200:16",))
    preview = await submissions.create_preview(ctx, ALICE, intent)
    await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    assert (await Scheduler(ctx).pass_once()).reserved
    pools = await fleet.list_fleet(ctx)
    assert [(p.pool.fleet, p.pool.name) for p in pools] == [("local", "local"), ("main", "a")]
    a = pools[1]
    assert (a.gpus_total, a.gpus_used) == (24, 16)
    by_name = {n.node.name: n for n in a.nodes}
    assert by_name["a-2"].node.sched is SchedState.CORDONED
    assert by_name["a-2"].node.connectivity is Connectivity.CONNECTED
    assert by_name["a-2"].gpus_used == 0
    used = [n for n in a.nodes if n.gpus_used]
    assert len(used) == 2 and all(
        (n.gpus_used, n.cpus_used, n.memory_mb_used, n.members) == (8, 96.0, 1_048_576, 1)
        for n in used
    )


async def test_profiles_named_and_implicit(ctx: Context) -> None:
    with pytest.raises(InvalidInput) as err:
        await fleet.put_profile(ctx, OPERATOR, Profile("big", "h200:12"))
    assert err.value.field == "request" and "h200:8 or h200:16" in err.value.fix
    with pytest.raises(InvalidInput) as shadow:
        await fleet.put_profile(ctx, OPERATOR, Profile("h200", "h200:8"))
    assert shadow.value.field == "name"
    with pytest.raises(Forbidden):
        await fleet.put_profile(ctx, ALICE, Profile("big", "h200:16"))
    await fleet.put_profile(ctx, OPERATOR, Profile("big", "h200:16", "two whole nodes"))
    await fleet.put_profile(ctx, OPERATOR, Profile("small", "cpu:1"))
    entries = {e.name: e for e in await fleet.list_profiles(ctx)}
    assert list(entries) == ["big", "small", "h200", "h200:N", "cpu:N"]
    big = entries["big"]
    assert (big.kind, big.pool, big.members, big.resources and big.resources.gpus) == (
        "named", "a", 2, 8,
    )  # fmt: skip
    assert entries["h200"].members == 1 and entries["h200:N"].max_count == 24
    assert "16, 24" in entries["h200:N"].description
    assert entries["cpu:N"].max_count == 4 and entries["cpu:N"].kind == "implicit"
    # a second pool of the same model: its forms need the pool's name
    await fleet.add_pool(ctx, OPERATOR, Pool("b", "main", "local", 8, 96, 1_048_576, "h200"))
    names = [e.name for e in await fleet.list_profiles(ctx)]
    assert {"a/h200", "a/h200:N", "b/h200", "b/h200:N"} <= set(names)
    assert "no nodes yet" in next(
        e.description for e in await fleet.list_profiles(ctx) if e.name == "b/h200"
    )
    resolved = await fleet.resolve_profiles(ctx, ["small"])
    assert (resolved.backend, resolved.roles[0].pool) == ("local", "local")


async def test_a_fence_that_loses_a_race_with_a_member_update_is_tried_again(
    ctx: Context,
) -> None:
    """The supervisor records a member's report while an operator declares its node lost: the
    fence's transaction loses the race (Conflict) and is tried again, never refused (the API
    fuzz test got a 409 from POST /v1/nodes/{node}/lost)."""
    intent = an_intent(profiles=("h200:8",))
    preview = await submissions.create_preview(ctx, ALICE, intent)
    await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    assert (await Scheduler(ctx).pass_once()).reserved
    [node] = [n.node.name for p in await fleet.list_fleet(ctx) for n in p.nodes if n.members]
    real_uow, races = ctx.uow, [1]

    class RacingMembers:  # the first update meets a concurrent change of the member
        def __init__(self, members: Any) -> None:
            self._members = members

        def __getattr__(self, name: str) -> Any:
            return getattr(self._members, name)

        async def update(self, *args: Any) -> None:
            if races:
                races.pop()
                raise Conflict("update member: lost a race with a concurrent transaction")
            await self._members.update(*args)

    class RacingUow:
        def __init__(self) -> None:
            self._uow = real_uow()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._uow, name)

        async def __aenter__(self) -> Any:
            uow = await self._uow.__aenter__()
            uow.members = RacingMembers(uow.members)
            return uow

        async def __aexit__(
            self,
            kind: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
        ) -> None:
            await self._uow.__aexit__(kind, exc, tb)

    racing = dataclasses.replace(ctx, uow=RacingUow)
    assert await reconcile.fence_node(racing, node, "node lost: the operator says so") == 1
    assert not races  # the race happened, and the second try won
    lost = [n.node for p in await fleet.list_fleet(ctx) for n in p.nodes if n.node.name == node]
    assert lost[0].connectivity is Connectivity.LOST
