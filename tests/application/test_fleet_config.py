"""Applying a whole fleet configuration (all or nothing, errors name the path in the file), and
the defaults an empty system gets; over in-memory adapters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from adapters.memory import MemoryStore, MemoryUnitOfWork
from application import fleet, policy
from application.auth import bootstrap_admin
from application.context import Context
from application.fleet_config import FleetConfig, PoolConfig, apply_fleet_config, ensure_defaults
from domain.auth import Principal, Role
from domain.errors import Forbidden, InvalidInput
from domain.fleet import Connectivity, Pool, Queue, SchedState, Team
from domain.requests import Profile
from tests.support.context import ALICE, memory_context

pytestmark = pytest.mark.unit
OPERATOR = Principal("olga", Role.OPERATOR)

A = Pool("a", "dc1", "node", 8, 96, 1_048_576, "h200")
B = Pool("b", "dc1", "node", 8, 64, 524_288, "h100")
CPU = Pool("cpu", "dc1", "node", 0, 32, 131_072)
CONFIG = FleetConfig(
    pools=(
        PoolConfig(A, tuple(f"a-{i}" for i in range(4))),
        PoolConfig(B, ("b-0",)),
        PoolConfig(CPU, ("cpu-0", "cpu-1")),
    ),
    profiles=(Profile("big", "a/h200:16", "two whole nodes"), Profile("tiny", "cpu/cpu:1")),
    teams=(Team("research"), Team("eval")),
    queues=(Queue("research", "research", 10, 32, 8), Queue("eval", "eval", 0, 8, None)),
)


def empty_context(tmp_path: Path) -> Context:
    ctx = memory_context(tmp_path)
    store = MemoryStore()
    return dataclasses.replace(ctx, uow=lambda: MemoryUnitOfWork(store))


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path)


async def test_apply_creates_then_reports_no_change(ctx: Context) -> None:
    first = await apply_fleet_config(ctx, CONFIG, OPERATOR)
    assert "pool a" in first.created and "node a-3" in first.created
    assert "queue research" in first.created and "profile big" in first.created
    assert not first.changed
    again = await apply_fleet_config(ctx, CONFIG, OPERATOR)
    assert (again.created, again.changed) == ((), ())
    assert again.unchanged == len(first.created)
    pools = {p.pool.name: p for p in await fleet.list_fleet(ctx)}
    assert [n.node.name for n in pools["a"].nodes] == ["a-0", "a-1", "a-2", "a-3"]
    queues = {u.queue.name: u.queue for u in await policy.list_queues(ctx)}
    assert queues["research"] == Queue("research", "research", 10, 32, 8)
    entries = {e.name: e for e in await fleet.list_profiles(ctx)}
    assert entries["big"].members == 2 and entries["tiny"].pool == "cpu"


async def test_apply_keeps_node_states_and_reports_changes(ctx: Context) -> None:
    await apply_fleet_config(ctx, CONFIG)
    await fleet.set_node_state(ctx, OPERATOR, "a-1", SchedState.DRAINING)
    changed = dataclasses.replace(
        CONFIG, queues=(Queue("research", "research", 20, 32, 8),), pools=(), profiles=()
    )
    result = await apply_fleet_config(ctx, changed, OPERATOR)
    assert result.changed == ("queue research",)
    await apply_fleet_config(ctx, CONFIG)
    node = next(
        n.node for p in await fleet.list_fleet(ctx) for n in p.nodes if n.node.name == "a-1"
    )
    # as it was made: draining, and disconnected until a daemon connects (a node-backend pool)
    assert (node.sched, node.connectivity) == (SchedState.DRAINING, Connectivity.DISCONNECTED)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (dataclasses.replace(CONFIG, pools=(CONFIG.pools[0], PoolConfig(
            dataclasses.replace(B, gpus_per_node=99)))), "pools[1].gpus_per_node"),
        (dataclasses.replace(CONFIG, pools=(*CONFIG.pools, PoolConfig(
            dataclasses.replace(CPU, name="cpu2"), ("a-0",)))), "pools[3].nodes[0]"),
        (dataclasses.replace(CONFIG, pools=(*CONFIG.pools, CONFIG.pools[1])), "pools[3].name"),
        (dataclasses.replace(CONFIG, pools=(PoolConfig(A, ("A 0",)),)), "pools[0].nodes[0]"),
        (dataclasses.replace(CONFIG, queues=(Queue("x", "nope"),)), "queues[0].team"),
        (dataclasses.replace(CONFIG, queues=(Queue("x", "eval", job_quota=-2),)),
         "queues[0].job_quota"),
        (dataclasses.replace(CONFIG, profiles=(Profile("big", "h200:12"),)),
         "profiles[0].request"),
        (dataclasses.replace(CONFIG, profiles=(Profile("h100", "h100:1"),)), "profiles[0].name"),
        (dataclasses.replace(CONFIG, teams=(Team("Eval"),)), "teams[0].name"),
    ],
)  # fmt: skip
async def test_a_bad_entry_names_its_path_and_nothing_is_written(
    ctx: Context, config: FleetConfig, field: str
) -> None:
    before = await fleet.list_fleet(ctx), await policy.list_queues(ctx)
    with pytest.raises(InvalidInput) as err:
        await apply_fleet_config(ctx, config, OPERATOR)
    assert err.value.field == field, err.value
    assert field.split(".")[0] in err.value.message
    assert (await fleet.list_fleet(ctx), await policy.list_queues(ctx)) == before
    assert not [e for e in await fleet.list_profiles(ctx) if e.kind == "named"]


async def test_only_operators_apply(ctx: Context) -> None:
    with pytest.raises(Forbidden):
        await apply_fleet_config(ctx, CONFIG, ALICE)


async def test_an_empty_system_gets_a_local_pool_and_a_default_queue(tmp_path: Path) -> None:
    ctx = empty_context(tmp_path)
    created = await ensure_defaults(ctx, cpus=12, memory_mb=64_000)
    assert created == ["pool local", "node local", "queue default"]
    assert await ensure_defaults(ctx, cpus=12, memory_mb=64_000) == []
    [local] = await fleet.list_fleet(ctx)
    assert local.pool == Pool("local", "local", "local", 0, 12.0, 64_000, None, "this host")
    assert [n.node.name for n in local.nodes] == ["local"]
    assert await bootstrap_admin(ctx)  # on top of it: the admin joins team default
    users = await policy.list_users(ctx, Principal("admin", Role.ADMIN))
    assert [(u.name, u.role, u.teams) for u in users] == [("admin", Role.ADMIN, ("default",))]
    entries = [e.name for e in await fleet.list_profiles(ctx)]
    assert entries == ["cpu:N"]


async def test_a_gpu_host_s_local_node_pool_offers_its_gpus(tmp_path: Path) -> None:
    ctx = empty_context(tmp_path)
    await ensure_defaults(ctx, 12, 64_000, backend="node", gpus=lambda: (8, "h200"))
    [local] = await fleet.list_fleet(ctx)
    assert local.pool == Pool("local", "local", "node", 8, 12.0, 64_000, "h200", "this host")
    assert "h200:N" in {e.name for e in await fleet.list_profiles(ctx)}


async def test_a_configured_fleet_gets_no_local_pool(tmp_path: Path) -> None:
    ctx = empty_context(tmp_path)
    await apply_fleet_config(ctx, CONFIG)
    never = lambda: pytest.fail("the host's GPUs are detected only for a new pool")  # noqa: E731
    assert await ensure_defaults(ctx, cpus=12, memory_mb=64_000, gpus=never) == []
    assert "local" not in [p.pool.name for p in await fleet.list_fleet(ctx)]
