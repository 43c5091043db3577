"""The gateway's incremental command pass (``NodeControl.commands_due``,
``application/node_commands.py``): idle sessions are not looked at, yet nothing a session needs is
missed: work placed on an idle node, a member an idle node reports that the ledger does not know,
a Commit re-sent to a member held ``starting``; a pass over more sessions than a slice yields to
the event loop in between and still reaches them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from application.enrollment import NodeIdentity
from application.node_commands import SLICE, Attention
from application.node_control import Session
from domain.lifecycle import JobState
from domain.node_protocol import CommandKind, MemberRef, MemberReport, NodeCapacity, Phase
from tests.sim.test_node_launch import World

pytestmark = pytest.mark.sim

CAP = NodeCapacity(0, None, 1.0, 1024)


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.fleet.connect_all()
    return w


async def test_idle_sessions_leave_the_pass_and_work_placed_brings_them_back(world: World) -> None:
    control = world.fleet.control
    assert control.attended() == set(world.fleet.nodes)  # new sessions are looked at once
    await world.fleet.pump()
    assert control.attended() == set()  # nothing placed, held or reported: idle
    job_id = await world.submit()
    d = await world.all_running(job_id)  # the ledger's work reached the idle nodes
    nodes = {m.node for m in d.attempts[-1].members}
    assert control.attended() == nodes
    assert world.fleet.starts() == {m.id: 1 for m in d.attempts[-1].members}
    await world.finish_all(job_id)
    await world.until(job_id, {JobState.SUCCEEDED})
    await world.fleet.pump()
    assert world.fleet.containers() == {}  # every member forgotten
    assert control.attended() == set()


async def test_a_member_reported_by_an_idle_node_and_unknown_to_the_ledger_gets_a_forget(
    world: World,
) -> None:
    control = world.fleet.control
    await world.fleet.pump()
    assert control.attended() == set()
    name = sorted(world.fleet.nodes)[0]
    session = world.fleet.nodes[name].session
    assert session is not None
    ref = MemberRef("att-x", "stranger", 0, 1)
    why = await control.handle(session, session.last_seq + 1, MemberReport(ref, Phase.RUNNING))
    assert why is not None  # not placed here: refused, held, and looked at in the next pass
    todo = await control.commands_due({name: session})
    assert [(o.command.kind, o.command.ref.member_id) for o in todo[name]] == [
        (CommandKind.FORGET, "stranger")
    ]
    assert await control.commands_due({name: session}) == {}
    assert control.attended() == set()


async def test_a_commit_is_sent_again_to_a_member_held_starting(world: World) -> None:
    control = world.fleet.control
    job_id = await world.submit()
    d = await world.all_running(job_id)
    member = d.attempts[-1].members[0]
    assert member.node is not None  # running: placed on a node
    session = world.fleet.nodes[member.node].session
    assert session is not None
    ref, _ = session.held[member.id]
    session.held[member.id] = (ref, Phase.STARTING)  # as if its Running report were lost
    live = {member.node: session}
    resend = control.settings.resend_after.total_seconds()
    for _ in range(2):
        world.clock.advance(seconds=resend)
        todo = await control.commands_due(live)
        assert [o.command.kind for o in todo[member.node]] == [CommandKind.COMMIT]
        assert await control.commands_due(live) == {}  # not again before resend_after


async def test_a_busy_session_whose_link_another_gateway_took_still_sees_its_ledger(
    world: World,
) -> None:
    """The pass reads the ledger by a join on this gateway's open links; a session still live
    here whose link row another gateway took (until the heartbeat flush ends it) is read apart,
    so it is never told to forget the members it holds."""
    control = world.fleet.control
    job_id = await world.submit()
    d = await world.all_running(job_id)
    member = d.attempts[-1].members[0]
    assert member.node is not None
    session = world.fleet.nodes[member.node].session
    assert session is not None
    ref, _ = session.held[member.id]
    session.held[member.id] = (ref, Phase.STARTING)  # a Commit is due again
    async with world.ctx.units.nodes() as uow:
        await uow.links.open(member.node, "gw-elsewhere", CAP, "10.9.9.9", "1.0", world.clock.now())
        await uow.commit()
    world.clock.advance(seconds=control.settings.resend_after.total_seconds())
    todo = await control.commands_due({member.node: session})
    assert [o.command.kind for o in todo[member.node]] == [CommandKind.COMMIT]
    assert member.node in control.attended()  # still busy: looked at in the next pass


async def test_a_pass_over_more_sessions_than_a_slice_yields_and_reaches_them_all(
    world: World,
) -> None:
    control = world.fleet.control
    count = SLICE * 2 + 7
    live: dict[str, Session] = {}
    for n in range(count):
        name = f"ghost-{n:05d}"
        session = Session(name, 1, 1, NodeIdentity(name, f"cred-{n}"))
        ref = MemberRef("att-g", f"m-{n}", 0, 1)
        await control.handle(session, 1, MemberReport(ref, Phase.RUNNING))
        live[name] = session
    ticks = 0

    async def heartbeats() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    beating = asyncio.create_task(heartbeats())
    await asyncio.sleep(0)
    ticks = 0
    try:
        todo = await control.commands_due(live)
    finally:
        beating.cancel()
    assert ticks >= 2  # answered in between (at least once per slice)
    assert len(todo) == count
    assert all([o.command.kind for o in items] == [CommandKind.FORGET] for items in todo.values())
    assert control.attended().isdisjoint(live)


def test_attention_keeps_a_newer_session_when_an_older_one_of_its_node_ends() -> None:
    attention = Attention()
    old = Session("n1", 1, 1, NodeIdentity("n1", "c"))
    new = Session("n1", 2, 1, NodeIdentity("n1", "c"))
    attention.add(old)
    attention.add(new)
    attention.drop(old)
    assert attention.nodes() == {"n1"}
    assert attention.live({"n1": new}) == [new]
    attention.settle([new])  # idle
    assert attention.nodes() == set()
    new.held["m"] = (MemberRef("a", "m", 0, 1), Phase.RUNNING)
    attention.settle([new])
    assert attention.live({}) == []  # busy, but not live in this view
    assert attention.nodes() == {"n1"}


def test_a_pass_over_an_older_session_never_takes_the_place_of_a_newer_one() -> None:
    """A newer session of a node opens while a pass over the older one is under way: the older
    one's end, or its being busy, must not take the newer one out of the next passes."""
    attention = Attention()
    old = Session("n1", 1, 1, NodeIdentity("n1", "c"))
    old.held["m"] = (MemberRef("a", "m", 0, 1), Phase.RUNNING)
    new = Session("n1", 2, 1, NodeIdentity("n1", "c"))
    new.held["k"] = (MemberRef("a", "k", 0, 1), Phase.RUNNING)
    attention.add(old)
    attention.add(new)  # opened during the pass over ``old``
    attention.settle([old])  # busy: it stays, but not in the newer one's place
    attention.drop(old)  # its stream ends
    assert attention.live({"n1": new}) == [new]
    idle = Session("n1", 3, 1, NodeIdentity("n1", "c"))
    attention.add(old)  # late: an older session never replaces a newer one
    attention.settle([idle])  # the live one, idle: the node leaves the passes
    assert attention.nodes() == set()
