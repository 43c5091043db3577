"""Two gangs that each need more than half of the pool, committed together, 1,000 times over
pools of 1 to 8 nodes: one is reserved whole and runs, the other waits holding nothing, and
`tp job why` says it waits for capacity."""

from __future__ import annotations

import random

import pytest

from application.explain import explain_job
from domain.fleet import Pool, Queue
from domain.lifecycle import JobState, MemberState
from entrypoints.sim_scenario import PoolSpec
from entrypoints.sim_world import OPERATOR, World

pytestmark = [pytest.mark.sim, pytest.mark.slow]

A = Pool("a", "sim", "node", 8, 96, 1_048_576, "h200")
REPETITIONS = 1000


def more_than_half(rng: random.Random, nodes: int) -> str:
    """A request for more than half of a pool of ``nodes`` 8-GPU nodes."""
    if nodes == 1:
        return f"h200:{rng.randint(5, 8)}"
    return f"h200:{8 * rng.randint(nodes // 2 + 1, nodes)}"


async def one_round(rng: random.Random) -> None:
    nodes = rng.randint(1, 8)
    world = World([PoolSpec(A, nodes)], [Queue("default", "research")])
    await world.setup()
    first = await world.submit([more_than_half(rng, nodes)], "default")
    second = await world.submit([more_than_half(rng, nodes)], "default")
    await world.tick()
    where = f"{nodes} nodes"

    async with world.api.uow() as uow:
        live = await uow.reservations.live()
        one = await uow.jobs.get(first)
        two = await uow.jobs.get(second)
        attempts_two = await uow.attempts.for_job(second)
        attempts_one = await uow.attempts.for_job(first)
        members = await uow.members.for_attempt(attempts_one[0].id)
    assert one is not None and two is not None
    assert [r.job_id for r in live] == [first], where  # exactly one reservation: the first's
    assert live[0].gpus == one.spec.gpus and len(live[0].assignments) == one.spec.members
    assert one.state is JobState.RUNNING, where
    assert all(m.state is MemberState.RUNNING for m in members)
    assert two.state is JobState.PENDING and attempts_two == [], where  # holding nothing
    assert await world.check() == []

    why = await explain_job(world.api, OPERATOR, second)
    assert why.kind == "capacity", (where, why)
    need = two.spec.roles[0].describe()
    assert why.text.startswith(f"needs {need}; "), why.text
    assert f"of {nodes} node{'s' if nodes != 1 else ''} in pool a" in why.text, why.text


async def test_of_two_gangs_bigger_than_half_the_pool_one_runs_and_the_other_holds_nothing() -> (
    None
):
    rng = random.Random(20260101)
    for _ in range(REPETITIONS):
        await one_round(rng)
