"""`tp fleet check` through the real use cases over in-memory adapters and the simulated node
daemons: the check gang is placed on exactly the pool's connected, schedulable nodes (failed
ones included), its members' output decides each node's result, and a failed node takes no new
work until a later check passes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from adapters.sim.nodes import SimNodeFleet
from application import fleet, fleet_check, jobs
from domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from domain.fleet import SchedState, Validation
from domain.fleet_check import PoolCheck
from domain.lifecycle import JobState
from tests.sim.test_node_launch import NODES, World
from tests.support.context import ADMIN, ALICE

pytestmark = pytest.mark.sim


def a_world(tmp_path: Path) -> World:
    """The simulated world, keeping whole member outputs (the test context keeps 64 bytes)."""
    w = World(tmp_path)
    w.ctx = replace(w.ctx, limits=replace(w.ctx.limits, max_log_bytes=64 * 1024))
    w.fleet = SimNodeFleet(w.ctx, NODES)
    w.supervisor = w._supervisor()
    return w


def output(rank: int, world: int, unreachable: frozenset[int]) -> bytes:
    lines = []
    for k in range(world):
        if k == rank:
            continue
        if k in unreachable and rank not in unreachable:
            lines.append(f"TPCHECK fail network: member {rank} cannot reach member {k} at x:1")
        else:
            lines.append(f"TPCHECK ok tcp to member {k}")
    lines += ["TPCHECK ok storage" if rank else "TPCHECK storage written", "TPCHECK done"]
    return ("\n".join(lines) + "\n").encode()


async def run_check(w: World, unreachable: frozenset[int] = frozenset()) -> PoolCheck:
    check = await fleet_check.start_check(w.ctx, ADMIN, "nodes", 10)
    d = await w.all_running(check.job_id)
    members = sorted(d.attempts[-1].members, key=lambda m: m.index)
    for m in members:
        w.fleet.finish(m.id, 0, output(m.index, len(members), unreachable))
    await w.until(check.job_id, {JobState.SUCCEEDED})
    for _ in range(12):  # within the grace for late output
        await w.step()
    found = await fleet_check.latest(w.ctx, "nodes")
    assert found is not None and found.id == check.id
    return found


async def validations(w: World) -> dict[str, Validation]:
    async with w.ctx.uow() as uow:
        return {n.name: n.validation for n in await uow.fleet.nodes()}


async def test_a_check_marks_the_node_its_peers_cannot_reach(tmp_path: Path) -> None:
    w = a_world(tmp_path)
    await w.fleet.connect_all()
    check = await run_check(w, unreachable=frozenset({2}))
    assert check.nodes == tuple(NODES)  # one member on each connected, schedulable node
    by_node = {r.node: r for r in check.results}
    assert check.ok is False
    assert not by_node[NODES[2]].ok
    assert "unreachable from" in by_node[NODES[2]].detail
    assert all(by_node[n].ok for n in NODES if n != NODES[2])
    assert "3 of 3 peers reached" not in by_node[NODES[0]].detail  # it could not reach one
    states = await validations(w)
    assert states[NODES[2]] is Validation.FAILED
    assert {states[n] for n in NODES if n != NODES[2]} == {Validation.PASSED}
    async with w.ctx.uow() as uow:
        failed = await uow.fleet.node(NODES[2])
    assert failed is not None and not failed.eligible
    assert failed.why_not == "failed its pool check"
    assert failed.validated_at == check.finished_at and "unreachable" in failed.validation_reason
    (pool,) = [p for p in await fleet.list_fleet(w.ctx) if p.pool.name == "nodes"]
    assert pool.last_check == check  # the fleet listing shows it per pool

    # a gang that needs all four nodes now waits
    job_id = await w.submit("nodes/cpu:4")
    for _ in range(5):
        await w.step()
    assert (await w.job(job_id)).job.state is JobState.PENDING

    # the failed node is checked again (it is not skipped) and passes: the mark is cleared,
    # and the waiting gang starts
    again = await run_check(w)
    assert again.ok is True and again.nodes == tuple(NODES)
    assert set((await validations(w)).values()) == {Validation.PASSED}
    d = await w.all_running(job_id)
    assert {m.node for m in d.attempts[-1].members} == set(NODES)


async def test_checks_are_for_operators_on_node_pools_with_two_nodes(tmp_path: Path) -> None:
    w = a_world(tmp_path)
    await w.fleet.connect_all()
    with pytest.raises(Forbidden):
        await fleet_check.start_check(w.ctx, ALICE, "nodes")
    with pytest.raises(InvalidInput, match="5 to 600 seconds"):
        await fleet_check.start_check(w.ctx, ADMIN, "nodes", 1)
    check = await fleet_check.start_check(w.ctx, ADMIN, "nodes", 10)
    with pytest.raises(Conflict, match="running already"):
        await fleet_check.start_check(w.ctx, ADMIN, "nodes", 10)
    assert (await fleet_check.latest(w.ctx, "nodes")) == check  # not ended: no results


async def test_a_check_needs_two_connected_schedulable_nodes(tmp_path: Path) -> None:
    w = a_world(tmp_path)
    await w.fleet.connect_all()
    async with w.ctx.uow() as uow:
        for name in NODES[1:]:
            await uow.fleet.set_node_state(name, SchedState.CORDONED)
        await uow.commit()
    with pytest.raises(InvalidInput, match="1 connected, schedulable node"):
        await fleet_check.start_check(w.ctx, ADMIN, "nodes")
    with pytest.raises(NotFound, match="no pool elsewhere"):
        await fleet_check.start_check(w.ctx, ADMIN, "elsewhere")


async def test_a_stopped_check_marks_no_node(tmp_path: Path) -> None:
    w = a_world(tmp_path)
    await w.fleet.connect_all()
    check = await fleet_check.start_check(w.ctx, ADMIN, "nodes", 10)
    await w.all_running(check.job_id)
    await jobs.cancel_job(w.ctx, ADMIN, check.job_id)
    await w.until(check.job_id, {JobState.CANCELLED})
    for _ in range(3):
        await w.step()
    found = await fleet_check.latest(w.ctx, "nodes")
    assert found is not None and found.finished_at is not None
    assert found.results == () and "stopped" in found.note
    assert set((await validations(w)).values()) == {Validation.UNCHECKED}
