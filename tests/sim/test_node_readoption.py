"""A member is declared ended only on proof (issue 18, defect 1), simulated: the real gateway
and daemon use cases over in-memory adapters.

A running member whose journal row is lost is re-adopted from its container's labels; a node
that reconnects from another machine (a copied credential, another engine) or whose engine
cannot be listed proves nothing about the members it does not hold: they are ``unknown``, their
gang runs on and the reservation stays held, until the right machine accounts for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.memory.journal import MemoryJournal
from adapters.sim.node_runtime import SimRuntime
from application.enrollment import NodeIdentity
from domain.errors import InvalidInput
from domain.lifecycle import JobState, MemberState
from domain.node_messages import Hello
from domain.node_protocol import MemberReport, Phase
from tests.sim.test_node_launch import World

pytestmark = pytest.mark.sim

PAIR = "nodes/cpu:1"  # two members on two nodes


async def _gang(w: World) -> tuple[str, str, str]:
    """A running two-member gang: its job id, and one of its nodes and the member there."""
    await w.fleet.connect_all()
    job_id = await w.submit(PAIR)
    d = await w.all_running(job_id)
    first = d.attempts[-1].members[0]
    assert first.node is not None
    return job_id, first.node, first.id


async def _steps(w: World, n: int = 5) -> None:
    for _ in range(n):
        await w.step()


async def test_a_running_member_whose_journal_row_is_lost_is_readopted(tmp_path: Path) -> None:
    w = World(tmp_path)
    job_id, node, member = await _gang(w)
    w.fleet.nodes[node].journal.delete(member)  # the row is gone (quarantined as corrupt)
    await w.fleet.crash_daemon(node)
    await w.fleet.connect(node)
    await _steps(w)
    d = await w.job(job_id)
    assert d.job.state is JobState.RUNNING, d.job.reason
    assert {m.state for m in d.attempts[-1].members} == {MemberState.RUNNING}
    entry = w.fleet.nodes[node].journal.get(member)
    assert entry is not None and entry.phase.value == "running"  # rebuilt from its labels
    assert sum(w.fleet.kills().values()) == 0
    assert await w.live_reservations() == 1
    w.fleet.finish(member, 3, b"last words\n")
    d = await w.until(job_id, {JobState.FAILED})
    [ended] = [m for m in d.attempts[-1].members if m.id == member]
    assert (ended.state, ended.exit_code) == (MemberState.FAILED, 3)


async def test_a_daemon_on_another_machine_proves_nothing_about_absent_members(
    tmp_path: Path,
) -> None:
    """The node's credential is copied to another machine whose daemon connects as that node:
    its journal and engine are empty. The member it does not hold is unknown, not failed."""
    w = World(tmp_path)
    job_id, node, member = await _gang(w)
    real = w.fleet.nodes[node]
    machine = (real.journal, real.runtime)
    await w.fleet.crash_daemon(node)
    real.journal, real.runtime = MemoryJournal(), SimRuntime(node, engine=f"other-{node}")
    await w.fleet.connect(node)
    await _steps(w)
    d = await w.job(job_id)
    assert d.job.state is JobState.RUNNING, d.job.reason
    [away] = [m for m in d.attempts[-1].members if m.id == member]
    assert away.state is MemberState.UNKNOWN
    assert "proves nothing" in away.reason and "tp node fence" in away.reason
    assert sum(w.fleet.kills().values()) == 0 and await w.live_reservations() == 1
    await w.fleet.crash_daemon(node)  # the real machine's daemon is back
    real.journal, real.runtime = machine
    await w.fleet.connect(node)
    d = await w.all_running(job_id)
    [back] = [m for m in d.attempts[-1].members if m.id == member]
    assert back.reason == ""
    await w.finish_all(job_id)
    await w.until(job_id, {JobState.SUCCEEDED})
    assert await w.live_reservations() == 0


async def test_an_engine_that_cannot_be_listed_proves_nothing(tmp_path: Path) -> None:
    w = World(tmp_path)
    job_id, node, member = await _gang(w)
    w.fleet.nodes[node].journal.delete(member)
    await w.fleet.disconnect(node)
    w.fleet.nodes[node].runtime.down = "the engine does not answer"
    await w.fleet.connect(node)
    await _steps(w)
    d = await w.job(job_id)
    [away] = [m for m in d.attempts[-1].members if m.id == member]
    assert d.job.state is JobState.RUNNING and away.state is MemberState.UNKNOWN
    assert "the engine does not answer" in away.reason
    assert await w.live_reservations() == 1
    w.fleet.nodes[node].runtime.down = None  # the engine is back: the next scan adopts it
    d = await w.all_running(job_id)
    assert sum(w.fleet.kills().values()) == 0


async def test_a_member_whose_container_is_really_gone_fails(tmp_path: Path) -> None:
    """The proof: the daemon that owns it listed its engine in full and found nothing."""
    w = World(tmp_path)
    job_id, node, member = await _gang(w)
    w.fleet.nodes[node].journal.delete(member)
    w.fleet.nodes[node].runtime.containers.pop(f"c-{member}")
    await w.fleet.crash_daemon(node)
    await w.fleet.connect(node)
    d = await w.until(job_id, {JobState.FAILED})
    [gone] = [m for m in d.attempts[-1].members if m.id == member]
    assert gone.state is MemberState.FAILED and "full scan" in gone.reason
    assert await w.live_reservations() == 0


async def test_a_journal_copied_to_another_machine_is_refused(tmp_path: Path) -> None:
    """The whole state directory (credential and journal) is copied to another machine: its
    daemon refuses to start rather than report every member gone from an engine that never
    held them."""
    w = World(tmp_path)
    job_id, node, _ = await _gang(w)
    await w.fleet.crash_daemon(node)
    w.fleet.nodes[node].runtime = SimRuntime(node, engine=f"other-{node}")
    with pytest.raises(InvalidInput, match="fence the node"):
        await w.fleet.connect(node)
    await _steps(w)
    d = await w.job(job_id)
    assert d.job.state is JobState.RUNNING and await w.live_reservations() == 1


async def test_a_missing_report_from_another_engine_proves_nothing(tmp_path: Path) -> None:
    """A daemon that names no engine (or another one) says a member's container is gone: the
    member it was prepared on another engine is unknown, not failed."""
    w = World(tmp_path)
    job_id, node, member = await _gang(w)
    entry = w.fleet.nodes[node].journal.get(member)
    assert entry is not None
    await w.fleet.disconnect(node)
    old = Hello(node, w.fleet.capacity, "10.0.0.9", "0.9", 1, (entry.report(),))
    gone = MemberReport(entry.order.ref, Phase.MISSING, None, "its container is gone")
    session = await w.fleet.control.open(NodeIdentity(node, f"cred-{node}"), old)
    assert await w.fleet.control.handle(session, 2, gone) is None
    await w.supervisor.tick()
    d = await w.job(job_id)
    [away] = [m for m in d.attempts[-1].members if m.id == member]
    assert d.job.state is JobState.RUNNING and away.state is MemberState.UNKNOWN
    assert "did not say which container engine" in away.reason
    assert await w.live_reservations() == 1


async def test_a_member_voted_on_one_engine_never_starts_on_another(tmp_path: Path) -> None:
    """Found by the nemesis (seed 629): member 0 was prepared on its machine, which voted yes;
    its stream dropped before the gang was decided, and a daemon on another machine holding a
    copy of the node's credential got the node's session and the member's Prepare. Both copies
    were then committed, one per session: the member ran twice. A member belongs to the engine
    that voted for it: the other copy is aborted and forgotten, and the member starts once."""
    w = World(tmp_path)
    await w.fleet.connect_all()
    job_id = await w.submit("nodes/cpu:2")  # two members, one per node
    await w.supervisor.tick()  # placed and begun: the Prepares are due
    first, second = (await w.job(job_id)).attempts[-1].members
    assert first.node is not None and second.node is not None
    w.fleet.partition(second.node)  # the gang cannot be decided yet
    await w.fleet.pump()
    real = w.fleet.nodes[first.node]
    assert (entry := real.journal.get(first.id)) is not None and entry.phase is Phase.PREPARED
    machine = (real.journal, real.runtime)
    await w.fleet.crash_daemon(first.node)  # the copy on another machine takes the session
    real.journal, real.runtime = MemoryJournal(), SimRuntime(first.node, engine="copy")
    copy = real.runtime
    await w.fleet.connect(first.node)
    await w.fleet.heal(second.node)
    await _steps(w)
    assert copy.starts[first.id] == 0 and f"c-{first.id}" not in copy.containers
    await w.fleet.crash_daemon(first.node)  # the real machine's daemon is back
    real.journal, real.runtime = machine
    await w.fleet.connect(first.node)
    d = await w.all_running(job_id)
    assert machine[1].starts[first.id] == 1 and copy.starts[first.id] == 0
    await w.finish_all(job_id)
    await w.until(job_id, {JobState.SUCCEEDED})
    assert await w.live_reservations() == 0 and d.attempts[-1].attempt.number == 1
