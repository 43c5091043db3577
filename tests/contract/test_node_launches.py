"""Contract: the node backend's ports (domain/node_ports.py), part 2 — the two-phase launch
ledger: begin once, decide once, votes and reports checked against epoch, fencing, decision
and phase order, stop requests and releases. (What the gateways read of it:
test_node_gateway_reads.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime

import pytest

from domain.admission import Assignment, Reservation
from domain.catalog import Resources
from domain.errors import Conflict
from domain.fleet import Connectivity, Node
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.node_ports import LaunchPlan, MemberLaunch
from domain.node_protocol import Decision, MemberRef, MemberReport, Phase
from domain.requests import RoleSpec
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import a_job, a_member, a_spec, an_attempt, at
from tests.contract.test_node_ports import (
    CAP,
    a_credential,
    a_join_token,
    blocked,
    racing,
    setup_fleet,
)

pytestmark = pytest.mark.contract


@dataclass(frozen=True)
class Gang:
    job: Job
    attempt: Attempt
    members: list[Member]
    plan: LaunchPlan
    launches: list[MemberLaunch]


async def new_gang(
    uow_factory: UnitOfWorkFactory,
    nodes: tuple[str, ...] = ("n-0", "n-1"),
    port: int = 29500,
    *,
    attempt_state: AttemptState = AttemptState.LAUNCHING,
    final: tuple[int, ...] = (),  # indexes of members recorded failed
    reserve: bool = True,
    begin: bool = True,
    job: Job | None = None,  # a new attempt of this job (its number: ``number``)
    number: int = 1,
) -> Gang:
    """A node-backend job whose attempt has one member per node (member i holds GPUs 2i,
    2i+1), its reservation and (``begin``) its launch at epoch 1, led from ``nodes[0]``."""
    per = Resources(cpus=12.0, memory_mb=131_072, gpus=2, gpu_model="h200")
    role = RoleSpec("main", f"h200:{2 * len(nodes)}", "n", len(nodes), per)
    new = job is None
    if job is None:
        job = a_job(spec=a_spec(roles=(role,), backend="node"), state=JobState.STARTING)
    attempt = an_attempt(job, number, state=attempt_state)
    failed = {"state": MemberState.FAILED}
    members = [
        a_member(attempt, i, node=n, **(failed if i in final else {})) for i, n in enumerate(nodes)
    ]
    plan = LaunchPlan(attempt.id, job.id, at(1), nodes[0], port)
    launches = [MemberLaunch(m.id, attempt.id, i, nodes[i], 1) for i, m in enumerate(members)]
    async with uow_factory() as uow:
        if new:
            await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        for m in members:
            await uow.members.add(m)
        if reserve:
            assignments = tuple(
                Assignment(i, "main", n, (2 * i, 2 * i + 1), 12_000, 131_072)
                for i, n in enumerate(nodes)
            )
            await uow.reservations.reserve(
                Reservation(attempt.id, job.id, "default", assignments, at(1))
            )
        if begin:
            await uow.launches.begin(plan, launches)
        await uow.commit()
    return Gang(job, attempt, members, plan, launches)


async def member_launches(uow_factory: UnitOfWorkFactory, attempt_id: str) -> list[MemberLaunch]:
    async with uow_factory() as uow:
        return await uow.launches.members(attempt_id)


def ref(g: Gang, index: int, epoch: int = 1) -> MemberRef:
    return MemberRef(g.attempt.id, g.members[index].id, index, epoch)


async def test_a_launch_begins_once(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    async with uow_factory() as uow:
        assert await uow.launches.plan(g.attempt.id) == g.plan
        assert await uow.launches.members(g.attempt.id) == g.launches
        assert await uow.launches.plan("att-missing") is None
        assert await uow.launches.members("att-missing") == []
        with pytest.raises(Conflict):
            await uow.launches.begin(replace(g.plan, master_port=29999), g.launches)
        assert await uow.launches.plan(g.attempt.id) == g.plan  # the unit goes on


async def test_a_decision_is_recorded_once(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    async with uow_factory() as uow:
        assert await uow.launches.decide(g.attempt.id, Decision.COMMIT, "all voted", at(3))
        assert not await uow.launches.decide(g.attempt.id, Decision.ABORT, "late", at(4))
        assert not await uow.launches.decide("att-missing", Decision.ABORT, "", at(4))
        await uow.commit()
    async with uow_factory() as uow:
        decided = replace(g.plan, decision=Decision.COMMIT, decided_at=at(3), reason="all voted")
        assert await uow.launches.plan(g.attempt.id) == decided
        assert not await uow.launches.decide(g.attempt.id, Decision.ABORT, "late", at(5))


async def test_concurrent_decisions_exactly_one_wins(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)

    def decide(d: Decision) -> Callable[[UnitOfWork], Awaitable[bool]]:
        return lambda uow: uow.launches.decide(g.attempt.id, d, str(d), at(3))

    decisions = [Decision.COMMIT, Decision.ABORT, Decision.ABORT]
    outcomes = await racing(uow_factory, *(decide(d) for d in decisions))
    assert sorted(outcomes) == [False, False, True]
    async with uow_factory() as uow:
        plan = await uow.launches.plan(g.attempt.id)
    assert plan is not None and plan.decision is decisions[outcomes.index(True)]


async def test_a_vote_needs_its_epoch_an_undecided_launch_and_counts_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    m0, m1 = (m.id for m in g.members)
    async with uow_factory() as uow:
        assert not await uow.launches.vote(m0, 2, True, "", at(2))  # another epoch
        assert await uow.launches.vote(m0, 1, True, "", at(2))
        assert not await uow.launches.vote(m0, 1, False, "changed my mind", at(3))
        assert not await uow.launches.vote("mem-missing", 1, True, "", at(3))
        assert await uow.launches.decide(g.attempt.id, Decision.ABORT, "timeout", at(4))
        assert not await uow.launches.vote(m1, 1, False, "no image", at(5))  # decided
        await uow.commit()
    first, second = await member_launches(uow_factory, g.attempt.id)
    assert first == replace(g.launches[0], vote=True, voted_at=at(2))
    assert second == g.launches[1]


async def test_a_vote_racing_a_decision_waits_for_it_and_is_refused(
    uow_factory: UnitOfWorkFactory, request: pytest.FixtureRequest
) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)

    async def vote() -> bool:
        async with uow_factory() as uow:
            done = await uow.launches.vote(g.members[0].id, 1, True, "", at(3))
            await uow.commit()
        return done

    async with uow_factory() as deciding:
        assert await deciding.launches.decide(g.attempt.id, Decision.ABORT, "timeout", at(2))
        task = asyncio.create_task(vote())
        await blocked(request, task)
        await deciding.commit()
    assert await task is False
    assert (await member_launches(uow_factory, g.attempt.id))[0] == g.launches[0]


async def test_a_no_vote_keeps_its_reason(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    async with uow_factory() as uow:
        assert await uow.launches.vote(g.members[1].id, 1, False, "no such image", at(2))
        await uow.commit()
    assert (await member_launches(uow_factory, g.attempt.id))[1] == replace(
        g.launches[1], vote=False, vote_reason="no such image", voted_at=at(2)
    )


async def test_a_busy_no_is_kept_and_a_yes_is_never_busy(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    async with uow_factory() as uow:
        assert await uow.launches.vote(g.members[0].id, 1, True, "", at(2), "e", busy=True)
        assert await uow.launches.vote(g.members[1].id, 1, False, "port held", at(2), busy=True)
        await uow.commit()
    first, second = await member_launches(uow_factory, g.attempt.id)
    assert (first.vote, first.vote_busy) == (True, False)
    assert (second.vote, second.vote_busy, second.vote_reason) == (False, True, "port held")


async def test_fencing_refuses_the_node_s_members_and_marks_them_fenced(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    m0, m1 = (m.id for m in g.members)
    async with uow_factory() as uow:
        assert await uow.links.fence("n-1") == 2
        await uow.commit()
    async with uow_factory() as uow:
        assert not await uow.launches.vote(m1, 1, True, "", at(2))
        assert not await uow.launches.vote(m1, 2, True, "", at(2))  # not its epoch either
        assert not await uow.launches.report(m1, MemberReport(ref(g, 1), Phase.PREPARED), at(2))
        assert not await uow.launches.progress(m1, 1, "pulling", at(2))
        assert await uow.launches.vote(m0, 1, True, "", at(2))  # n-0 was not fenced
        works = await uow.launches.on_nodes(["n-0", "n-1"])
        await uow.commit()
    assert {w.placed.ref.member_id: w.placed.fenced for w in works} == {m0: False, m1: True}
    assert (await member_launches(uow_factory, g.attempt.id))[1] == g.launches[1]


async def test_reported_phases_only_move_forward(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    m0 = g.members[0].id
    r0 = ref(g, 0)

    async def report(report: MemberReport, now: datetime | None = None) -> bool:
        async with uow_factory() as uow:
            done = await uow.launches.report(m0, report, now or at(9))
            await uow.commit()
        return done

    assert await report(MemberReport(r0, Phase.PREPARING, at=at(3)))
    assert await report(MemberReport(r0, Phase.PREPARED, at=at(4)))
    assert not await report(MemberReport(r0, Phase.PREPARING, at=at(5)))  # a replay
    assert not await report(MemberReport(r0, Phase.PREPARED, at=at(5)))  # the same again
    assert not await report(MemberReport(replace(r0, epoch=2), Phase.RUNNING))
    assert not await report(MemberReport(replace(r0, attempt_id="att-other"), Phase.RUNNING))
    assert not await report(MemberReport(replace(r0, index=1), Phase.RUNNING))
    assert (await member_launches(uow_factory, g.attempt.id))[0] == replace(
        g.launches[0], phase=Phase.PREPARED, reported_at=at(4)
    )
    assert await report(MemberReport(r0, Phase.RUNNING), now=at(6))  # no time: now
    assert (await member_launches(uow_factory, g.attempt.id))[0].reported_at == at(6)
    assert await report(MemberReport(r0, Phase.EXITED, 3, "boom", at(7)))
    assert not await report(MemberReport(r0, Phase.MISSING, None, "gone", at(8)))  # final
    assert not await report(MemberReport(r0, Phase.RUNNING, at=at(8)))
    assert (await member_launches(uow_factory, g.attempt.id))[0] == replace(
        g.launches[0], phase=Phase.EXITED, exit_code=3, reason="boom", reported_at=at(7)
    )


async def test_progress_needs_the_epoch(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    async with uow_factory() as uow:
        assert await uow.launches.progress(g.members[0].id, 1, "pulling image 40 %", at(2))
        assert not await uow.launches.progress(g.members[1].id, 2, "stale", at(2))
        assert not await uow.launches.progress("mem-missing", 1, "?", at(2))
        await uow.commit()
    first, second = await member_launches(uow_factory, g.attempt.id)
    assert (first.progress, first.progress_at) == ("pulling image 40 %", at(2))
    assert second == g.launches[1]


async def test_stop_requests_and_releases_are_idempotent(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    m0, m1 = (m.id for m in g.members)
    async with uow_factory() as uow:
        await uow.launches.request_stop([m0], at(2))
        await uow.launches.request_stop([m0, m1, "mem-missing"], at(3))
        await uow.launches.request_stop([], at(3))
        await uow.launches.release("n-1", [m0], at(4))  # not on n-1: not n-1's to release
        await uow.launches.release("n-0", [m0], at(4))
        await uow.launches.release("n-0", {m0}, at(5))
        await uow.launches.release("n-0", [], at(5))
        await uow.commit()
    first, second = await member_launches(uow_factory, g.attempt.id)
    assert (first.stop_requested_at, first.released_at) == (at(2), at(4))
    assert (second.stop_requested_at, second.released_at) == (at(3), None)
    async with uow_factory() as uow:  # released members are no one's work any more
        works = await uow.launches.on_nodes(["n-0", "n-1"])
    assert [(w.placed.ref.member_id, w.placed.stop_requested) for w in works] == [(m1, True)]


async def test_a_unit_of_work_left_without_commit_leaves_nothing(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.fleet.put_node(Node("n-0", "n", connectivity=Connectivity.DISCONNECTED))
        await uow.commit()
    g = await new_gang(uow_factory, begin=False)
    async with uow_factory() as uow:
        await uow.enrollment.add_join_token(a_join_token())
        assert await uow.enrollment.use_join_token("hash-j1", "n-0", at(1))
        await uow.enrollment.add_credential(a_credential("c1"))
        await uow.links.open("n-0", "gw", CAP, "10.0.0.1", "1.0", at(1))
        await uow.links.fence("n-1")
        await uow.launches.begin(g.plan, g.launches)
        assert await uow.launches.vote(g.members[0].id, 1, True, "", at(2))
        await uow.launches.decide(g.attempt.id, Decision.COMMIT, "", at(3))
    async with uow_factory() as uow:
        assert await uow.enrollment.join_token("hash-j1") is None
        assert await uow.enrollment.credentials("n-0") == []
        assert await uow.links.get("n-0") is None
        assert await uow.launches.plan(g.attempt.id) is None
        assert await uow.launches.members(g.attempt.id) == []
        assert await uow.launches.on_nodes(["n-0", "n-1"]) == []
        assert (await uow.fleet.node("n-0")) == Node(
            "n-0", "n", connectivity=Connectivity.DISCONNECTED
        )
        assert await uow.links.fence("n-1") == 2  # the rolled-back fence never happened


async def test_a_yes_vote_records_the_engine_and_a_node_may_not_account_for_a_member(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Issue 18, defect 1: the engine a member was prepared on (only its full scan proves the
    member's container gone), and why its node did not account for it (it is unknown)."""
    await setup_fleet(uow_factory)
    g = await new_gang(uow_factory)
    m0, m1 = (m.id for m in g.members)
    async with uow_factory() as uow:
        assert await uow.launches.vote(m0, 1, True, "", at(2), "engine-a")
        assert await uow.launches.vote(m1, 1, False, "no image", at(2), "engine-b")
        assert await uow.launches.account(m0, 1, "node n-0 does not account for it", at(3))
        assert not await uow.launches.account(m0, 2, "stale epoch", at(3))
        assert not await uow.launches.account("mem-missing", 1, "nobody", at(3))
        await uow.commit()
    first, second = await member_launches(uow_factory, g.attempt.id)
    assert (first.engine, first.unaccounted) == ("engine-a", "node n-0 does not account for it")
    assert (second.engine, second.unaccounted) == ("", "")  # a no vote names no engine
    async with uow_factory() as uow:
        assert await uow.launches.account(m0, 1, "", at(4))  # its node holds it again
        [work, _] = await uow.launches.on_nodes(["n-0", "n-1"])
        await uow.links.fence("n-0")
        assert not await uow.launches.account(m0, 1, "after the fence", at(5))
        await uow.commit()
    assert (work.launch.engine, work.launch.unaccounted) == ("engine-a", "")
