"""The node daemon's use cases over the in-memory journal and the simulated runtime."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.memory.journal import MemoryJournal
from adapters.sim.node_runtime import SimRuntime
from application.node_agent import NodeAgent
from domain.errors import InvalidInput
from domain.node_messages import (
    TOKEN_LOST,
    Inventory,
    LogChunk,
    PrepareOrder,
    SourceChunk,
    TokenRenewal,
    Vote,
)
from domain.node_protocol import (
    Command,
    CommandKind,
    EngineScan,
    MemberRef,
    MemberReport,
    NodeCapacity,
    Phase,
)

pytestmark = pytest.mark.unit


def order(member: str = "m0", index: int = 0, epoch: int = 1, **kw: Any) -> PrepareOrder:
    base: dict[str, Any] = dict(
        ref=MemberRef("att-1", member, index, epoch),
        node="n1",
        job_id="job-1",
        image="sha256:abc",
        command=("true",),
        env={},
        cpus=1.0,
        memory_mb=64,
        gpu_indices=(0,),
        source_digest=None,
        members=1,
        process_model="single-process",
        check_port=0,
    )
    base.update(kw)
    return PrepareOrder(**base)


INSTALLATION = "inst-a"


class Harness:
    def __init__(self) -> None:
        self.journal = MemoryJournal({"installation": INSTALLATION})
        self.runtime = SimRuntime("n1")
        self.sent: list[Any] = []
        self.agent = self.new_agent()

    def new_agent(self) -> NodeAgent:
        async def send(body: Any) -> None:
            self.sent.append(body)

        return NodeAgent("n1", self.journal, self.runtime, send)

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        await asyncio.gather(*self.agent._tasks.values(), return_exceptions=True)

    def votes(self) -> list[Vote]:
        return [b for b in self.sent if isinstance(b, Vote)]

    def phase(self, member: str = "m0") -> Phase | None:
        e = self.journal.get(member)
        return e.phase if e else None


async def prepared(h: Harness, o: PrepareOrder | None = None) -> PrepareOrder:
    o = o or order()
    if not h.agent.recovered and h.agent.installation:
        await h.agent.recover()  # as the daemon does once the gateway welcomed it
    await h.agent.on_prepare(o)
    await h.settle()
    return o


async def test_prepare_creates_without_starting_and_votes_yes() -> None:
    h = Harness()
    await prepared(h)
    assert h.phase() is Phase.PREPARED
    assert h.votes() == [Vote(MemberRef("att-1", "m0", 0, 1), True, "")]
    assert h.runtime.starts["m0"] == 0 and len(h.runtime.containers) == 1


async def test_repeated_prepare_votes_again_and_prepares_once() -> None:
    h = Harness()
    o = await prepared(h)
    await prepared(h, o)
    assert [v.yes for v in h.votes()] == [True, True]
    assert len(h.runtime.containers) == 1


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"node": "n2"}, "this Prepare is for node n2"),
        ({"source_digest": "sha256:" + "0" * 64}, "did not arrive intact"),
    ],
)
async def test_prepare_refusals(kw: dict[str, Any], why: str) -> None:
    h = Harness()
    await prepared(h, order(**kw))
    [vote] = h.votes()
    assert not vote.yes and not vote.busy and why in vote.reason
    assert h.phase() is Phase.REFUSED and not h.runtime.containers
    await prepared(h, order(**kw))  # a repeated Prepare hears the same no, from the journal
    assert h.votes()[-1] == vote and not h.runtime.containers


async def test_a_rendezvous_port_held_by_a_stranger_is_a_busy_no_that_a_repeat_asks_again() -> None:
    h = Harness()
    h.runtime.busy_ports.add(29500)
    o = await prepared(h, order(check_port=29500))
    [vote] = h.votes()
    assert (vote.yes, vote.busy) == (False, True)
    assert "rendezvous port 29500 is in use on node n1" in vote.reason
    assert h.phase() is None and not h.runtime.containers  # nothing journalled: a passing no
    h.runtime.busy_ports.clear()
    await prepared(h, o)  # asked again once the port is free: prepared
    assert h.votes()[-1].yes and h.phase() is Phase.PREPARED


async def test_a_busy_gpu_is_refused() -> None:
    h = Harness()
    await prepared(h)
    await prepared(h, order("m1"))
    assert [(v.yes, v.busy) for v in h.votes()] == [(True, False), (False, True)]
    assert "GPU 0 is still held by member m0" in h.votes()[1].reason


async def test_runtime_refusal_is_a_no_vote() -> None:
    h = Harness()
    h.runtime.refusal = lambda o: "image sha256:abc cannot be pulled"
    await prepared(h)
    assert h.votes()[0].reason == "image sha256:abc cannot be pulled"
    assert h.phase() is Phase.REFUSED


async def test_source_chunks_are_verified() -> None:
    h = Harness()
    data = b"x" * 10
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    await h.agent.on_source(SourceChunk(digest, 0, data[:4], False))
    await h.agent.on_source(SourceChunk(digest, 4, data[4:], True))
    await prepared(h, order(source_digest=digest))
    assert h.votes()[0].yes
    bad = "sha256:" + "1" * 64
    await h.agent.on_source(SourceChunk(bad, 0, data, True))
    await prepared(h, order("m1", gpu_indices=(1,), source_digest=bad))
    assert not h.votes()[1].yes


async def test_commit_starts_exactly_once() -> None:
    h = Harness()
    o = await prepared(h)
    for _ in range(3):
        await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    assert h.runtime.starts["m0"] == 1
    await h.agent.watch_once()
    assert h.phase() is Phase.RUNNING


async def test_a_start_the_engine_could_not_make_is_made_when_the_commit_comes_again() -> None:
    h = Harness()
    o = await prepared(h)
    h.runtime.down = "connection refused"  # between the vote and the commit
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    assert h.phase() is Phase.STARTING and h.runtime.starts["m0"] == 0
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))  # said again: still down
    await h.agent.watch_once()  # nor does watching start or end it
    assert h.phase() is Phase.STARTING and h.runtime.starts["m0"] == 0
    h.runtime.down = None
    for _ in range(2):  # said again once the engine answers, and once more after that
        await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    assert h.runtime.starts["m0"] == 1
    assert h.phase() is Phase.RUNNING
    phases = [b.phase for b in h.sent if isinstance(b, MemberReport)]
    assert phases[-1] is Phase.RUNNING and Phase.EXITED not in phases


async def test_a_stopped_member_that_never_started_is_not_started_by_a_late_commit() -> None:
    h = Harness()
    o = await prepared(h)
    h.runtime.down = "connection refused"
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    h.runtime.down = None
    await h.agent.on_command(Command(CommandKind.STOP, o.ref, "stop requested"))
    await h.settle()
    await h.agent.watch_once()
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))  # one sent before the stop
    assert h.runtime.starts["m0"] == 0
    assert h.phase() is Phase.MISSING


async def test_a_command_the_engine_cannot_carry_out_is_left_undone_until_said_again() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.welcomed(1, INSTALLATION)
    h.runtime.down = "connection refused"
    # neither raises (that would end the control stream): each is left undone
    await h.agent.on_command(Command(CommandKind.ABORT, o.ref, "the gang launch was aborted"))
    stranger = MemberRef("att-9", "m9", 0, 1)
    await h.agent.on_command(Command(CommandKind.FORGET, stranger, "unknown"))  # lists the engine
    assert h.phase() is Phase.PREPARED and "c-m0" in h.runtime.containers
    h.runtime.down = None
    await h.agent.on_command(Command(CommandKind.ABORT, o.ref, "the gang launch was aborted"))
    assert h.phase() is Phase.ABORTED and "c-m0" not in h.runtime.containers


async def test_stale_commit_is_refused_and_starts_nothing() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.welcomed(2)  # the node was fenced since
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    assert h.runtime.starts["m0"] == 0 and h.agent.refused == 1


async def test_abort_rolls_back_and_never_kills_a_started_member() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.ABORT, o.ref, "gang aborted"))
    assert h.phase() is Phase.ABORTED and not h.runtime.containers
    o1 = await prepared(h, order("m1"))
    await h.agent.on_command(Command(CommandKind.COMMIT, o1.ref))
    await h.agent.on_command(Command(CommandKind.ABORT, o1.ref))
    assert h.runtime.running() and h.runtime.kills["m1"] == 0


async def test_exit_sends_the_log_before_the_status() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    await h.agent.watch_once()
    h.runtime.finish("m0", 3)
    h.sent.clear()
    await h.agent.watch_once()
    assert h.sent[-1] == MemberReport(o.ref, Phase.EXITED, 3, "", None)
    chunks = [b for b in h.sent if isinstance(b, LogChunk)]
    assert [(c.live, c.last) for c in chunks] == [(True, False), (False, True)]
    assert (
        chunks[0].offset == 0
        and chunks[0].data == chunks[1].data == b"member m0 exited with code 3\n"
    )


async def test_forget_removes_container_and_entry() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    await h.agent.on_command(Command(CommandKind.FORGET, o.ref, "fenced"))
    assert h.journal.get("m0") is None and not h.runtime.containers
    assert h.runtime.kills["m0"] == 1


async def test_restart_rolls_back_preparing_and_readopts_running() -> None:
    h = Harness()
    running = await prepared(h, order("m0"))
    await h.agent.on_command(Command(CommandKind.COMMIT, running.ref))
    # m1 was being prepared when the daemon died: its container exists, the vote never left
    caught = order("m1", gpu_indices=(1,), installation=INSTALLATION)
    h.runtime.containers["c-m1"] = type(h.runtime.containers["c-m0"])("c-m1", caught)
    from domain.node_daemon_ports import JournalEntry

    h.journal.put(JournalEntry(caught, Phase.PREPARING))
    h.agent = h.new_agent()  # kill -9: a new daemon on the same journal and engine
    await h.agent.recover()
    assert h.phase("m1") is Phase.REFUSED and "c-m1" not in h.runtime.containers
    assert h.phase("m0") is Phase.RUNNING and h.runtime.starts["m0"] == 1
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    assert {r.ref.member_id: r.phase for r in hello.journal} == {
        "m0": Phase.RUNNING,
        "m1": Phase.REFUSED,
    }


async def test_exit_while_disconnected_is_reported_at_the_next_welcome() -> None:
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))

    async def down(body: Any) -> None:
        raise ConnectionError("not connected")

    h.agent.send = down
    await h.agent.watch_once()
    h.runtime.finish("m0", 0)
    await h.agent.watch_once()
    assert h.phase() is Phase.EXITED
    h.sent.clear()
    h.agent.send = h.new_agent().send
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    assert [r.log_pending for r in hello.journal] == [True]  # held until its log is stored
    await h.agent.welcomed(1)
    assert any(isinstance(b, LogChunk) for b in h.sent)
    assert h.sent[-1] == replace(hello.journal[0], log_pending=False)  # the log, then the exit


async def test_a_renewed_collector_token_is_journalled_for_its_own_launch_only() -> None:
    h = Harness()
    o = await prepared(h, order(collector_token="old"))
    at = datetime(2026, 12, 4, tzinfo=UTC)
    await h.agent.on_token(TokenRenewal(replace(o.ref, epoch=0), "stale", at))  # older launch
    await h.agent.on_token(TokenRenewal(MemberRef("att-9", "m9", 0, 1), "nobody", at))
    entry = h.journal.get("m0")
    assert entry is not None and entry.order.collector_token == "old"
    await h.agent.on_token(TokenRenewal(o.ref, "new", at))
    entry = h.journal.get("m0")
    assert entry is not None and entry.order.collector_token == "new"
    assert entry.report().token_expires_at == at  # reported, so a lost renewal is sent again
    assert h.journal.get("m9") is None


# -- re-adoption, engine and installation (issue 18, defects 1 and 4) ---------------------------


async def running(h: Harness, o: PrepareOrder | None = None) -> PrepareOrder:
    o = await prepared(h, o)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    await h.agent.watch_once()
    assert h.phase(o.ref.member_id) is Phase.RUNNING
    return o


async def test_a_lost_row_is_rebuilt_and_a_member_that_never_started_is_removed() -> None:
    h = Harness()
    live = await running(h, order("m0", collector_token="tok"))
    waiting = await prepared(h, order("m1", gpu_indices=(1,)))
    h.journal.delete("m0")  # both rows are lost (quarantined as corrupt)
    h.journal.delete("m1")
    h.agent = h.new_agent()
    assert await h.agent.recover()
    entry = h.journal.get("m0")
    assert entry is not None and entry.phase is Phase.RUNNING and entry.container_id == "c-m0"
    rebuilt = entry.order
    assert (rebuilt.ref, rebuilt.job_id, rebuilt.gpu_indices) == (live.ref, "job-1", (0,))
    assert entry.order.collector_token == ""  # never in labels: a secret
    assert entry.report().token_expires_at == TOKEN_LOST  # so the gateway renews it at once
    gone = h.journal.get("m1")
    assert gone is not None and gone.phase is Phase.REFUSED and "before it started" in gone.reason
    assert "c-m1" not in h.runtime.containers and h.runtime.starts["m1"] == 0
    assert h.runtime.kills["m0"] == 0 and h.runtime.starts["m0"] == 1
    at = datetime(2027, 1, 1, tzinfo=UTC)
    await h.agent.on_token(TokenRenewal(live.ref, "renewed", at))
    renewed = h.journal.get("m0")
    assert renewed is not None and renewed.order.collector_token == "renewed"
    assert waiting.ref.member_id == "m1"


async def test_a_container_whose_labels_do_not_name_it_is_left_alone_and_reported() -> None:
    h = Harness()
    o = await running(h)
    h.journal.delete("m0")
    h.runtime.containers["c-m0"].labelled = False
    h.agent = h.new_agent()
    await h.agent.recover()
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    assert hello.journal == () and hello.scan == EngineScan("engine-n1", True, "", ("m0",))
    assert h.runtime.running() and h.agent.orphans == {"m0": "c-m0"}
    await h.agent.on_command(Command(CommandKind.FORGET, o.ref, "fenced"))  # the operator's call
    assert not h.runtime.containers


async def test_a_journal_of_another_engine_is_refused_an_empty_one_follows_the_engine() -> None:
    h = Harness()
    await running(h)
    h.runtime = SimRuntime("n1", engine="engine-of-another-machine")
    h.agent = h.new_agent()
    with pytest.raises(InvalidInput, match="tp node fence n1") as refused:
        await h.agent.recover()
    assert "engine-n1" in refused.value.message and h.journal.get("m0") is not None
    empty = Harness()
    empty.journal.set_meta("engine", "engine-before-a-reinstall")
    assert await empty.agent.recover()
    assert empty.journal.meta("engine") == "engine-n1"


async def test_the_installation_comes_from_the_welcome_and_never_changes() -> None:
    h = Harness()
    h.journal = MemoryJournal()  # enrolled, never welcomed: it touches no engine yet
    h.agent = h.new_agent()
    assert not await h.agent.recover()
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    assert hello.scan is not None and not hello.scan.complete
    assert "installation" in hello.scan.reason
    await prepared(h)  # a Prepare before the Welcome: refused, nothing created
    assert "has not learnt its installation" in h.votes()[0].reason and h.votes()[0].busy
    assert not h.runtime.containers and h.phase() is None
    with pytest.raises(InvalidInput, match="did not name its installation"):
        await h.agent.welcomed(1)  # an older control plane
    h.sent.clear()
    await h.agent.welcomed(1, INSTALLATION)  # reconciled at once, before any further order
    assert h.journal.meta("installation") == INSTALLATION and h.agent.recovered
    [inventory] = [b for b in h.sent if isinstance(b, Inventory)]
    assert inventory == Inventory(EngineScan("engine-n1", True), ())  # the no was not journalled
    with pytest.raises(InvalidInput, match="belongs to installation inst-a"):
        await h.agent.welcomed(1, "inst-other")
    await prepared(h, order("m1", gpu_indices=(1,)))
    assert h.votes()[-1].yes and h.runtime.containers["c-m1"].order.installation == INSTALLATION


async def test_a_scan_the_engine_cannot_answer_is_incomplete_and_made_again_later() -> None:
    h = Harness()
    await running(h)
    h.journal.delete("m0")
    h.runtime.down = "the engine at unix:///x does not answer"
    h.agent = h.new_agent()
    assert not await h.agent.recover()
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    assert hello.scan == EngineScan("", False, "the engine at unix:///x does not answer")
    await h.agent.welcomed(1, INSTALLATION)  # accepted: it scans again until the engine answers
    h.sent.clear()
    await h.agent.watch_once()
    assert not any(isinstance(b, Inventory) for b in h.sent)
    await prepared(h, order("m1", gpu_indices=(1,)))  # no Prepare before it reconciled
    assert "has not reconciled its journal with its engine yet (the engine at" in (
        h.votes()[-1].reason
    )
    h.runtime.down = None
    await h.agent.watch_once()
    [inventory] = [b for b in h.sent if isinstance(b, Inventory)]
    assert inventory.scan.complete
    assert {r.ref.member_id: r.phase for r in inventory.journal} == {
        "m0": Phase.RUNNING,  # re-adopted once the engine answered (m1's no was not journalled)
    }


# -- a daemon the gateway refuses changes nothing (a restored backup, a copied credential) -----


def journal_state(journal: MemoryJournal) -> tuple[Any, ...]:
    return (journal.entries(), journal.epoch(), journal.writes)


async def test_a_restored_backup_refused_its_session_leaves_the_live_daemons_members() -> None:
    h = Harness()  # n1's own daemon: m0 prepared (created, never started), awaiting its Commit
    backup = MemoryJournal({"installation": INSTALLATION, "engine": "engine-n1"})  # before it
    await prepared(h)
    copy = NodeAgent("n1", backup, h.runtime, h.new_agent().send)  # the same engine
    before = journal_state(backup)
    hello = await copy.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.9", "test")
    await copy.watch_once()  # refused: no Welcome; its watch loop runs meanwhile
    assert h.runtime.containers["c-m0"].state == "created" and h.phase() is Phase.PREPARED
    assert journal_state(backup) == before  # its own journal untouched too
    assert hello.journal == () and hello.scan is not None and not hello.scan.complete
    assert "m0" in hello.scan.reason  # its silence about m0 proves nothing
    await h.agent.on_command(Command(CommandKind.COMMIT, replace(order().ref)))
    await h.agent.watch_once()
    assert h.phase() is Phase.RUNNING and h.runtime.starts["m0"] == 1


async def test_recovery_waits_for_the_welcome_then_says_what_changed() -> None:
    h = Harness()
    await prepared(h)
    caught = order("m1", gpu_indices=(1,), installation=INSTALLATION)
    h.runtime.containers["c-m1"] = type(h.runtime.containers["c-m0"])("c-m1", caught)
    from domain.node_daemon_ports import JournalEntry

    h.journal.put(JournalEntry(caught, Phase.PREPARING))
    h.journal.delete("m0")  # m0's row lost: its container is re-adopted, and removed (never
    h.agent = h.new_agent()  # started); a second daemon on the journal, or a restart
    before = journal_state(h.journal)
    hello = await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    await h.agent.watch_once()
    await h.agent.on_prepare(order("m2", gpu_indices=(2,)))  # no Prepare before the Welcome
    await h.settle()
    assert not h.votes()[-1].yes and "not reconciled" in h.votes()[-1].reason
    assert journal_state(h.journal) == before and set(h.runtime.containers) == {"c-m0", "c-m1"}
    assert [(r.ref.member_id, r.phase) for r in hello.journal] == [("m1", Phase.PREPARING)]
    assert hello.scan is not None and not hello.scan.complete and "(m0)" in hello.scan.reason
    h.sent.clear()
    await h.agent.welcomed(1, INSTALLATION)  # accepted: reconciled, then said again
    assert not h.runtime.containers and h.phase("m1") is Phase.REFUSED
    [inventory] = [b for b in h.sent if isinstance(b, Inventory)]
    assert inventory.scan == EngineScan("engine-n1", True)
    said = {r.ref.member_id: (r.phase, r.reason) for r in inventory.journal}
    assert said["m1"] == (Phase.REFUSED, "the daemon restarted while preparing")
    assert said["m0"][0] is Phase.REFUSED and "before it started" in said["m0"][1]
    h.sent.clear()
    await h.agent.hello(NodeCapacity(1, "h200", 2, 1024), "10.0.0.1", "test")
    await h.agent.welcomed(1, INSTALLATION)  # a reconnect that changes nothing: no Inventory
    assert not any(isinstance(b, Inventory) for b in h.sent)
