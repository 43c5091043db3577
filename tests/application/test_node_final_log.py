"""The daemon's side of "a member's final log is stored before its end" (docs/node-backend.md,
"Logs"): an exit is said as ended only on the stream its final log went over whole; otherwise
it is ``log_pending`` and said again after the log."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from domain.node_messages import Inventory, LogChunk
from domain.node_protocol import Command, CommandKind, MemberReport, NodeCapacity, Phase
from tests.application.test_node_agent import Harness, prepared

pytestmark = pytest.mark.unit

CAPACITY = NodeCapacity(1, "h200", 2, 1024)


async def down(body: Any) -> None:
    raise ConnectionError("not connected")


async def exited_while_away(h: Harness, output: bytes = b"done\n") -> None:
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    connected = h.agent.send
    h.agent.send = down
    h.runtime.finish("m0", 0, output)
    await h.agent.watch_once()
    assert h.phase() is Phase.EXITED
    h.agent.send = connected
    h.sent.clear()


def kinds(sent: list[Any]) -> list[str]:
    out = []
    for b in sent:
        if isinstance(b, LogChunk) and not b.live:
            out.append("last" if b.last else "piece")
        elif isinstance(b, MemberReport):
            out.append(f"{b.phase.name}{' pending' if b.log_pending else ''}")
    return out


async def test_a_hello_says_an_exit_pending_and_the_welcome_sends_the_log_then_the_exit() -> None:
    h = Harness()
    await exited_while_away(h)
    hello = await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    [report] = hello.journal
    assert report.phase is Phase.EXITED and report.log_pending and report.exit_code == 0
    await h.agent.welcomed(1)
    assert kinds(h.sent) == ["last", "EXITED"]
    assert h.sent[0].data == b"done\n"
    # a second stream: pending again (its log must go over that stream too)
    hello = await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    assert [r.log_pending for r in hello.journal] == [True]


async def test_a_log_bigger_than_a_piece_goes_in_pieces_before_the_exit() -> None:
    h = Harness()
    big = b"y" * (3 * 1024 * 1024 + 1)
    await exited_while_away(h, big)
    await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    await h.agent.welcomed(1)
    assert kinds(h.sent) == ["piece", "piece", "piece", "last", "EXITED"]
    assert b"".join(b.data for b in h.sent if isinstance(b, LogChunk)) == big[-16 * 1024 * 1024 :]


async def test_a_stream_that_begins_while_the_log_is_sent_gets_the_log_again_before_the_exit() -> (
    None
):
    """The Welcome of the new stream read the journal before the exit was in it: the exit is
    not said on the new stream until its log went over that stream whole."""
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    await h.agent.watch_once()
    h.sent.clear()
    sent: list[Any] = []
    began = False

    async def cut_after_the_log(body: Any) -> None:
        nonlocal began
        sent.append(body)
        if isinstance(body, LogChunk) and body.last and not began:  # the old stream dies here
            began = True
            await h.agent.hello(CAPACITY, "10.0.0.1", "test")
            sent.append("HELLO")
            await h.agent.welcomed(1)  # the journal still says running

    h.agent.send = cut_after_the_log
    h.runtime.finish("m0", 3, b"oom\n")
    await h.agent.watch_once()
    after = sent[sent.index("HELLO") + 1 :]
    assert kinds(after)[-2:] == ["last", "EXITED"]
    assert [b.data for b in after if isinstance(b, LogChunk) and not b.live] == [b"oom\n"]


async def test_an_exit_said_again_before_its_log_went_is_pending() -> None:
    """A Commit said again to an exited member is answered with its report: pending until its
    log went over this stream."""
    h = Harness()
    await exited_while_away(h)
    entry = h.journal.get("m0")
    assert entry is not None
    await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    await h.agent.on_command(Command(CommandKind.COMMIT, entry.order.ref))
    assert kinds(h.sent) == ["EXITED pending"]
    await h.agent.welcomed(1)
    await h.agent.on_command(Command(CommandKind.COMMIT, entry.order.ref))
    assert kinds(h.sent) == ["EXITED pending", "last", "EXITED", "EXITED"]


async def test_an_exit_without_a_known_container_gets_a_log_that_says_why() -> None:
    h = Harness()
    await exited_while_away(h)
    entry = h.journal.get("m0")
    assert entry is not None
    h.journal.put(replace(entry, container_id=None))  # a journal of an older daemon
    await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    await h.agent.welcomed(1)
    assert kinds(h.sent) == ["last", "EXITED"]
    assert h.sent[0].data == (
        b"[tuneplane: log collection failed: its container is not known to this node]\n"
    )


async def test_a_forgotten_member_leaves_nothing_behind() -> None:
    h = Harness()
    await exited_while_away(h)
    entry = h.journal.get("m0")
    assert entry is not None
    await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    await h.agent.welcomed(1)
    await h.agent.on_command(Command(CommandKind.FORGET, entry.order.ref, "recorded final"))
    assert h.journal.get("m0") is None and "m0" not in h.agent._logs_on


async def test_an_inventory_says_exits_pending_and_sends_their_logs_again_after_it() -> None:
    """While the daemon's scan cannot complete, the gateway cannot name its engine and refuses
    what it says of its members, final logs included: the Inventory that follows says every
    exit pending, then each log goes again, then the exit."""
    h = Harness()
    o = await prepared(h)
    await h.agent.on_command(Command(CommandKind.COMMIT, o.ref))
    await h.agent.hello(CAPACITY, "10.0.0.1", "test")
    await h.agent.welcomed(1)
    h.runtime.down = "the engine does not answer"
    await h.agent.scan(report=True)  # incomplete: the next watches scan again
    h.runtime.finish("m0", 0, b"done\n")
    await h.agent.watch_once()
    assert kinds(h.sent)[-2:] == ["last", "EXITED"]  # what the gateway refuses meanwhile
    h.sent.clear()
    h.runtime.down = None
    await h.agent.watch_once()
    [inventory] = [b for b in h.sent if isinstance(b, Inventory)]
    assert [(r.phase, r.log_pending) for r in inventory.journal] == [(Phase.EXITED, True)]
    after = h.sent[h.sent.index(inventory) + 1 :]
    assert kinds(after) == ["last", "EXITED"]
