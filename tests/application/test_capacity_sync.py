"""Capacity read from Slurm (application/capacity_sync.py with the real Slurm backend on
recorded v0.0.41 answers: partition ``debug``, nodes n1 mixed, n2 allocated, n3 idle+drain,
n4 down+not_responding) written to the fleet, as the supervisor's sweep does."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.memory.backend import MemoryBackend
from adapters.memory.fleet import MemoryFleetRepository
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.capacity import gpus_of
from application.capacity_sync import sync_capacity
from application.context import Context
from domain.backend_ports import ExecutionBackend
from domain.fleet import Connectivity, Node, Pool, SchedState
from tests.support.context import LOCAL_POOL, memory_context
from tests.unit.test_slurm_versions import replaying

P = "/slurm/v0.0.41"


def with_slurm(ctx: Context, tmp_path: Path, **kw: object) -> tuple[Context, SlurmBackend]:
    client = replaying(
        "v0.0.41", {("GET", f"{P}/nodes"): "nodes", ("GET", f"{P}/partitions"): "partitions"}
    )
    backend = SlurmBackend(client, tmp_path / "shared", **kw)  # type: ignore[arg-type]
    backends: dict[str, ExecutionBackend] = {"local": MemoryBackend(), "slurm": backend}
    return dataclasses.replace(ctx, backends=backends, capacity={"slurm": backend}), backend


async def fleet(ctx: Context) -> tuple[dict[str, Pool], dict[str, Node]]:
    async with ctx.uow() as uow:
        pools = {p.name: p for p in await uow.fleet.pools()}
        nodes = {n.name: n for n in await uow.fleet.nodes()}
    return pools, nodes


async def test_partitions_become_pools_and_nodes_keep_slurm_state(tmp_path: Path) -> None:
    ctx, _ = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)
    async with ctx.uow() as uow:  # a node of the pool that Slurm no longer reports
        await uow.fleet.put_pool(Pool("debug", "default", "slurm", 0, 2.0, 2000))
        await uow.fleet.put_node(Node("n9", "debug"))
        await uow.commit()
    assert await sync_capacity(ctx) > 0
    pools, nodes = await fleet(ctx)
    debug = pools["debug"]
    assert (debug.backend, debug.cpus_per_node, debug.memory_mb_per_node, debug.gpus_per_node) == (
        "slurm",
        2.0,
        2000,
        0,
    )
    states = {n: (nodes[n].sched, nodes[n].connectivity) for n in ("n1", "n2", "n3", "n4", "n9")}
    assert states == {
        "n1": (SchedState.SCHEDULABLE, Connectivity.CONNECTED),
        "n2": (SchedState.SCHEDULABLE, Connectivity.CONNECTED),
        "n3": (SchedState.DRAINING, Connectivity.CONNECTED),
        "n4": (SchedState.SCHEDULABLE, Connectivity.DISCONNECTED),
        "n9": (SchedState.SCHEDULABLE, Connectivity.DISCONNECTED),
    }
    assert all(nodes[n].pool == "debug" for n in states)
    assert pools["local"] == LOCAL_POOL  # other backends' pools untouched
    assert await sync_capacity(ctx) == 0  # nothing changed since


async def test_a_pool_of_another_backend_is_left_alone(tmp_path: Path) -> None:
    ctx, _ = with_slurm(
        memory_context(tmp_path, nodes=1), tmp_path, partitions={"local": "debug"}
    )  # pool "local" is the local one
    before = await fleet(ctx)
    assert await sync_capacity(ctx) == 0
    assert await fleet(ctx) == before


async def test_slurm_down_changes_nothing(tmp_path: Path) -> None:
    ctx, backend = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    backend.client._http = httpx.AsyncClient(
        transport=httpx.MockTransport(down), base_url="http://s"
    )
    before = await fleet(ctx)
    assert await sync_capacity(ctx) == 0
    assert await fleet(ctx) == before


@pytest.mark.parametrize(
    ("gres", "want"),
    [
        ("gpu:h100:8(S:0-1)", (8, "h100")),
        ("gpu:4", (4, "gpu")),
        ("", (0, None)),
        ("shard:2", (0, None)),
    ],
)
def test_gpus_from_gres(gres: str, want: tuple[int, str | None]) -> None:
    assert gpus_of(gres) == want


def test_pool_shape_is_the_smallest_node() -> None:
    from adapters.slurm.capacity import capacity
    from adapters.slurm.versions import SlurmNode, SlurmPartition

    def node(name: str, cpus: int, gres: str) -> SlurmNode:
        return SlurmNode(name, "idle", frozenset(), cpus, 4000, ("gpu",), gres)

    pools, nodes = capacity(
        [SlurmPartition("gpu", "g[1-2]", 2, 24)],
        [node("g1", 16, "gpu:h200:8"), node("g2", 8, "gpu:h200:4")],
        {"gpu": "h200s"},
    )
    assert [(p.name, p.gpus_per_node, p.gpu_model, p.cpus_per_node) for p in pools] == [
        ("h200s", 4, "h200", 8.0)
    ]
    assert [dataclasses.astuple(n)[:2] for n in nodes] == [("g1", "h200s"), ("g2", "h200s")]


# -- issue 19 item 5: fleet truth on Slurm ---------------------------------------------------


async def _submit(ctx: Context, backend: SlurmBackend, profile: str) -> str:
    import uuid

    async def answers() -> None:  # no recording of ping for v0.0.41: pinning only pings
        return None

    backend.client.ping = answers  # type: ignore[method-assign]

    from application import submissions
    from tests.support.context import ALICE
    from tests.unit.builders import an_intent

    preview = await submissions.create_preview(ctx, ALICE, an_intent(profiles=(profile,)))
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def test_a_pool_whose_partition_is_missing_is_unavailable_and_admits_nothing(
    tmp_path: Path,
) -> None:
    from application.scheduler import Scheduler
    from domain.admission import decide

    ctx, backend = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)
    async with ctx.uow() as uow:  # configured by a fleet file; Slurm has no such partition
        await uow.fleet.put_pool(Pool("bogus", "default", "slurm", 0, 2.0, 2000))
        await uow.fleet.put_node(Node("b1", "bogus"))
        await uow.commit()
    assert await sync_capacity(ctx) > 0
    pools, nodes = await fleet(ctx)
    reason = pools["bogus"].unavailable
    assert "Slurm has no partition bogus (partitions: debug)" in reason, reason
    assert "TUNEPLANE_SLURM_PARTITIONS=bogus=PARTITION" in reason  # the fix
    assert nodes["b1"].connectivity is Connectivity.DISCONNECTED
    assert pools["debug"].unavailable == ""

    job = await _submit(ctx, backend, "bogus/cpu:1")
    assert (await Scheduler(ctx).pass_once()).reserved == []
    async with ctx.uow() as uow:
        snapshot = await uow.scheduling.snapshot(100)
    wait = decide(snapshot).waits[job]
    assert "pool bogus takes no new work: Slurm has no partition bogus" in wait.text, wait.text

    async with ctx.uow() as uow:  # a fleet file applied again keeps the mark
        await uow.fleet.put_pool(Pool("bogus", "default", "slurm", 0, 2.0, 2000, None, "again"))
        await uow.commit()
    assert (await fleet(ctx))[0]["bogus"].unavailable == reason
    assert await sync_capacity(ctx) == 0  # nothing new to write


async def test_a_pool_is_marked_after_its_nodes_are_disconnected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each write commits alone: a reader that sees the pool marked must see its nodes already
    # disconnected (a CI run's API answered between the two when the mark went first)
    ctx, _ = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)
    async with ctx.uow() as uow:
        await uow.fleet.put_pool(Pool("bogus", "default", "slurm", 0, 2.0, 2000))
        await uow.fleet.put_node(Node("b1", "bogus"))
        await uow.commit()
    order: list[str] = []
    mark, state = MemoryFleetRepository.set_pool_unavailable, MemoryFleetRepository.set_node_state

    async def marking(self: MemoryFleetRepository, name: str, reason: str) -> None:
        order.append(f"pool {name}")
        await mark(self, name, reason)

    async def setting(self: MemoryFleetRepository, name: str, *args: Any, **kw: Any) -> Any:
        order.append(f"node {name}")
        return await state(self, name, *args, **kw)

    monkeypatch.setattr(MemoryFleetRepository, "set_pool_unavailable", marking)
    monkeypatch.setattr(MemoryFleetRepository, "set_node_state", setting)
    await sync_capacity(ctx)
    assert order.index("node b1") < order.index("pool bogus"), order

    async with ctx.uow() as uow:  # a pool Slurm reports again, its node seen down meanwhile
        await uow.fleet.set_pool_unavailable("debug", "Slurm has no partition debug")
        await uow.fleet.set_node_state("n1", None, Connectivity.DISCONNECTED, ctx.clock.now())
        await uow.commit()
    order.clear()
    await sync_capacity(ctx)
    assert order.index("node n1") < order.index("pool debug"), order  # nodes first, then the mark


async def test_the_mark_goes_when_slurm_reports_the_pool(tmp_path: Path) -> None:
    ctx, _ = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)
    async with ctx.uow() as uow:
        await uow.fleet.put_pool(Pool("debug", "default", "slurm", 0, 2.0, 2000))
        await uow.fleet.set_pool_unavailable("debug", "Slurm has no partition debug")
        await uow.commit()
    await sync_capacity(ctx)
    assert (await fleet(ctx))[0]["debug"].unavailable == ""


async def test_a_node_drained_since_the_last_sync_is_not_reserved(tmp_path: Path) -> None:
    """The scheduler reads Slurm again before it reserves on a Slurm pool: n3 (drained in
    Slurm, still schedulable in the fleet's last view) is not given the job."""
    from application.scheduler import Scheduler

    ctx, backend = with_slurm(memory_context(tmp_path, nodes=1), tmp_path)
    await sync_capacity(ctx)
    async with ctx.uow() as uow:  # the fleet's view from before n3 was drained and n1, n2 got busy
        for name, sched in (("n1", "cordoned"), ("n2", "cordoned"), ("n3", "schedulable")):
            await uow.fleet.set_node_state(name, SchedState(sched), Connectivity.CONNECTED)
        await uow.commit()
    job = await _submit(ctx, backend, "debug/cpu:1")
    result = await Scheduler(ctx).pass_once()
    assert result.reserved == [job]
    [placement] = result.decisions.placements
    assert [a.node for a in placement.assignments] != ["n3"]
    assert (await fleet(ctx))[1]["n3"].sched is SchedState.DRAINING


def test_a_node_in_a_state_slurm_may_not_use_is_never_schedulable() -> None:
    from adapters.slurm.capacity import node_states
    from adapters.slurm.versions import SlurmNode

    def state(base: str, *flags: str) -> tuple[SchedState, Connectivity]:
        return node_states(SlurmNode("n", base, frozenset(flags), 2, 2000, ("debug",), ""))

    assert state("idle") == (SchedState.SCHEDULABLE, Connectivity.CONNECTED)
    assert state("mixed") == (SchedState.SCHEDULABLE, Connectivity.CONNECTED)
    assert state("idle", "drain")[0] is SchedState.DRAINING
    assert state("down")[1] is Connectivity.DISCONNECTED
    assert state("unknown")[1] is Connectivity.DISCONNECTED
    assert state("planned") == (SchedState.CORDONED, Connectivity.CONNECTED)  # not known here
    assert state("") == (SchedState.CORDONED, Connectivity.CONNECTED)
