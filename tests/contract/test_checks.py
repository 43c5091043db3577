"""Contract: pool checks (CheckRepository) and a node's check result (FleetRepository's
``set_validation``), which the scheduler's snapshot turns into "failed its pool check"."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from domain.errors import Conflict
from domain.fleet import Connectivity, Node, Pool, SchedState, Validation
from domain.fleet_check import NodeResult, PoolCheck
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at

pytestmark = pytest.mark.contract

POOL = Pool("p", "main", "node", 0, 4, 8192)
OTHER = Pool("q", "main", "node", 0, 4, 8192)
RESULTS = (
    NodeResult("n-0", True, "2 of 2 peers reached"),
    NodeResult("n-1", False, "storage: member 0's file never appeared in the shared directory"),
)


def a_check(id: str, minutes: float, pool: str = "p") -> PoolCheck:
    return PoolCheck(id, pool, f"job-{id}", ("n-0", "n-1", "n-2"), at(minutes))


async def setup(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.fleet.put_pool(POOL)
        await uow.fleet.put_pool(OTHER)
        for i in range(3):
            await uow.fleet.put_node(Node(f"n-{i}", "p"))
        await uow.commit()


async def test_checks_round_trip_and_the_latest_is_per_pool(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup(uow_factory)
    first, second, elsewhere = a_check("chk-1", 1), a_check("chk-2", 5), a_check("chk-3", 9, "q")
    async with uow_factory() as uow:
        assert await uow.checks.latest("p") is None
        assert await uow.checks.unfinished() == []
        for check in (second, first, elsewhere):
            await uow.checks.add(check)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checks.latest("p") == second
        assert await uow.checks.latest("q") == elsewhere
        assert await uow.checks.latest("missing") is None
        assert await uow.checks.unfinished() == [first, second, elsewhere]  # by start
        with pytest.raises(Conflict):
            await uow.checks.add(first)  # same id


async def test_a_check_is_finished_once_with_its_results(uow_factory: UnitOfWorkFactory) -> None:
    await setup(uow_factory)
    check = a_check("chk-1", 1)
    async with uow_factory() as uow:
        await uow.checks.add(check)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checks.finish(check.id, RESULTS, "a note", at(2))
        await uow.commit()
    done = replace(check, finished_at=at(2), results=RESULTS, note="a note")
    async with uow_factory() as uow:
        assert await uow.checks.latest("p") == done
        assert done.ok is False
        assert await uow.checks.unfinished() == []
        # a second settler (another process) finds it finished and changes nothing
        assert not await uow.checks.finish(check.id, (), "", at(3))
        assert not await uow.checks.finish("chk-missing", (), "", at(3))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.checks.latest("p") == done


async def test_racing_settlers_finish_a_check_once(uow_factory: UnitOfWorkFactory) -> None:
    await setup(uow_factory)
    async with uow_factory() as uow:
        await uow.checks.add(a_check("chk-1", 1))
        await uow.commit()

    async def settle(note: str) -> bool:
        async with uow_factory() as uow:
            won = await uow.checks.finish("chk-1", RESULTS, note, at(2))
            await asyncio.sleep(0.05)  # hold the row while the other one tries
            await uow.commit()
            return won

    wins = await asyncio.gather(settle("one"), settle("two"))
    assert sorted(wins) == [False, True]
    async with uow_factory() as uow:
        latest = await uow.checks.latest("p")
    assert latest is not None and latest.note == ("one" if wins[0] else "two")


async def test_a_node_keeps_its_check_result_apart_from_its_other_states(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup(uow_factory)
    reason = "unreachable from n-0 on 10.0.0.2:29501"
    async with uow_factory() as uow:
        await uow.fleet.set_validation("n-1", Validation.FAILED, reason, at(3))
        await uow.fleet.set_validation("n-0", Validation.PASSED, "", at(3))
        await uow.fleet.set_validation("gone", Validation.FAILED, "x", at(3))  # nothing
        await uow.commit()
    failed = Node("n-1", "p", validation=Validation.FAILED, validation_reason=reason)
    failed = replace(failed, validated_at=at(3))
    async with uow_factory() as uow:
        assert await uow.fleet.node("n-1") == failed
        assert (await uow.fleet.node("n-0")) == Node(
            "n-0", "p", validation=Validation.PASSED, validated_at=at(3)
        )
        assert await uow.fleet.node("n-2") == Node("n-2", "p")  # unchecked
        assert await uow.fleet.node("gone") is None
        # other state changes keep it; so does storing the node again in its pool
        after = await uow.fleet.set_node_state("n-1", SchedState.CORDONED, Connectivity.LOST)
        assert (after.validation, after.validation_reason) == (Validation.FAILED, reason)
        await uow.fleet.put_node(Node("n-1", "p", SchedState.SCHEDULABLE))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.node("n-1") == replace(failed, connectivity=Connectivity.CONNECTED)
        # a node moved to another pool is unchecked again: the result was about other peers
        await uow.fleet.put_node(Node("n-1", "q"))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.node("n-1") == Node("n-1", "q")
        await uow.fleet.set_validation("n-1", Validation.PASSED, "", at(4))
        await uow.fleet.set_validation("n-1", Validation.FAILED, "later", at(5))  # the last wins
        await uow.commit()
    async with uow_factory() as uow:
        node = await uow.fleet.node("n-1")
        assert node is not None
        assert (node.validation, node.validation_reason, node.validated_at) == (
            Validation.FAILED,
            "later",
            at(5),
        )


async def test_the_snapshot_keeps_a_failed_node_from_new_work(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup(uow_factory)
    async with uow_factory() as uow:
        await uow.fleet.set_validation("n-1", Validation.FAILED, "storage", at(1))
        await uow.fleet.set_validation("n-2", Validation.PASSED, "", at(1))
        await uow.commit()
    async with uow_factory() as uow:
        snap = await uow.scheduling.snapshot(100)
    why = {v.name: v.why_not for v in snap.nodes}
    assert why == {"n-0": "", "n-1": "failed its pool check", "n-2": ""}
