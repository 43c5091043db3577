"""Contract: what one session per node rests on (domain/node_ports.py) — a link knows when its
stream was closed and who opened it, ``current`` decides concurrent opens of one node (one
wins, whichever units race), heartbeats of a replaced session say so, and security events are
coalesced per (node, kind, source) and capped per node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from domain.errors import NotFound
from domain.fleet import Connectivity
from domain.node_events import NodeEvent, NodeEventKind, event
from domain.node_ports import NodeLink
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import at
from tests.contract.test_node_ports import CAP, node_state, open_link, racing, setup_fleet

pytestmark = pytest.mark.contract

REFUSED = NodeEventKind.SESSION_REFUSED


async def get_link(uow_factory: UnitOfWorkFactory, node: str) -> NodeLink | None:
    async with uow_factory() as uow:
        return await uow.links.get(node)


async def test_a_link_records_who_opened_it_and_when_its_stream_closed(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        opened = await uow.links.open(
            "n-0", "gw", CAP, "10.0.0.1", "1.0", at(1), peer="192.0.2.7", instance="abc"
        )
        await uow.commit()
    assert (opened.closed_at, opened.peer, opened.instance) == (None, "192.0.2.7", "abc")
    assert opened.alive(at(0.5)) and not opened.alive(at(1))
    assert await get_link(uow_factory, "n-0") == opened
    async with uow_factory() as uow:
        assert await uow.links.close("n-0", 2, at(2)) is False  # not its session: no mark
        assert await uow.links.close("n-0", 1, at(3)) is True
        assert await uow.links.close("n-0", 1, at(4)) is True  # again: the first time is kept
        await uow.commit()
    closed = await get_link(uow_factory, "n-0")
    assert closed == replace(opened, closed_at=at(3))
    assert not closed.alive(at(0))
    reopened = await open_link(uow_factory, "n-0", 5)  # a new session is open again
    assert (reopened.session, reopened.closed_at, reopened.peer, reopened.instance) == (
        2,
        None,
        "",
        "",
    )


async def test_close_all_closes_the_current_sessions_given_and_only_those(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Many streams' ends in one call: each as ``close`` would (a replaced session, a node
    given twice, a node unknown change nothing but what is theirs), the others left open."""
    await setup_fleet(uow_factory)
    for node in ("n-0", "n-1", "n-2"):
        await open_link(uow_factory, node, 1)
    await open_link(uow_factory, "n-1", 2)  # n-1's session 1 was replaced by session 2
    async with uow_factory() as uow:
        closed = await uow.links.close_all(
            [("n-1", 1), ("n-0", 1), ("n-0", 1), ("missing", 1)], at(3)
        )
        assert await uow.links.close_all([], at(3)) == []
        await uow.commit()
    assert closed == ["n-0"]
    n0, n1, n2 = [await get_link(uow_factory, n) for n in ("n-0", "n-1", "n-2")]
    assert n0 is not None and n0.closed_at == at(3)
    assert n1 is not None and (n1.session, n1.closed_at) == (2, None)
    assert n2 is not None and n2.closed_at is None
    states = {n: await node_state(uow_factory, n) for n in ("n-0", "n-1", "n-2")}
    assert {n: s.connectivity if s else None for n, s in states.items()} == {
        "n-0": Connectivity.DISCONNECTED,
        "n-1": Connectivity.CONNECTED,
        "n-2": Connectivity.CONNECTED,
    }
    async with uow_factory() as uow:  # again, later: the first end is kept
        assert await uow.links.close_all([("n-0", 1), ("n-1", 2)], at(4)) == ["n-0", "n-1"]
        await uow.commit()
    n0 = await get_link(uow_factory, "n-0")
    assert n0 is not None and n0.closed_at == at(3)


async def test_current_locks_the_node_so_that_one_of_racing_opens_wins(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Three gateways open a session of n-0 at once, each only if no live one exists: the
    node's row lock makes the second and third see the first's session."""
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        assert await uow.links.current("n-0") is None  # no link yet
        assert await uow.links.current("missing") is None

    def admit(instance: str) -> Callable[[UnitOfWork], Awaitable[bool]]:
        async def call(uow: UnitOfWork) -> bool:
            live = await uow.links.current("n-0")
            if live is not None and live.alive(at(0)):
                return False
            await uow.links.open("n-0", "gw", CAP, "a", "v", at(1), instance=instance)
            return True

        return call

    outcomes = await racing(uow_factory, admit("a"), admit("b"), admit("c"))
    assert sorted(outcomes) == [False, False, True]
    link = await get_link(uow_factory, "n-0")
    assert link is not None and link.session == 1
    assert link.instance == "abc"[outcomes.index(True)]


async def test_heartbeats_of_a_replaced_session_are_returned(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)
    await open_link(uow_factory, "n-0", 2)  # session 2 replaced session 1
    await open_link(uow_factory, "n-1", 2)
    async with uow_factory() as uow:
        stale = await uow.links.beat(
            [("n-0", 1, at(3)), ("n-0", 2, at(4)), ("n-1", 1, at(5)), ("n-2", 1, at(5))]
        )
        assert await uow.links.beat([]) == []
        await uow.commit()
    assert stale == [("n-0", 1)]  # n-1's session 1 is current; n-2 has no link
    n0 = await get_link(uow_factory, "n-0")
    assert n0 is not None and n0.heartbeat_at == at(4)


async def test_a_closed_session_is_not_revived(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)
    await open_link(uow_factory, "n-1", 1)
    async with uow_factory() as uow:
        assert await uow.links.expire(at(5), at(11)) == ["n-0", "n-1"]
        await uow.links.close("n-1", 1, at(11))  # its gateway saw the stream end
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.links.revive([("n-0", 1), ("n-1", 1)], at(12)) == ["n-0"]
        await uow.commit()


# -- security events ------------------------------------------------------------------------


def refused(source: str, minutes: float, message: str = "m", node: str = "n-0") -> NodeEvent:
    return event(node, REFUSED, source, at(minutes), message)


async def record(uow_factory: UnitOfWorkFactory, e: NodeEvent, keep: int = 50) -> NodeEvent:
    async with uow_factory() as uow:
        stored = await uow.node_events.record(e, keep)
        await uow.commit()
    return stored


async def listed(uow_factory: UnitOfWorkFactory, node: str, limit: int = 100) -> list[NodeEvent]:
    async with uow_factory() as uow:
        return await uow.node_events.of_node(node, limit)


async def test_events_of_one_source_are_one_row_that_counts(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    first = await record(uow_factory, refused("192.0.2.7", 1, "first"))
    assert first == NodeEvent("n-0", REFUSED, "192.0.2.7", at(1), at(1), 1, "first")
    again = await record(uow_factory, refused("192.0.2.7", 2, "second"))
    assert again == NodeEvent("n-0", REFUSED, "192.0.2.7", at(1), at(2), 2, "second")
    late = await record(uow_factory, refused("192.0.2.7", 1.5, "late"))  # clocks disagree
    assert (late.first_at, late.last_at, late.count) == (at(1), at(2), 3)
    other = await record(uow_factory, refused("198.51.100.1", 3))
    await record(uow_factory, refused("192.0.2.7", 9, node="n-1"))
    assert await listed(uow_factory, "n-0") == [other, late]  # most recently seen first
    assert await listed(uow_factory, "n-0", limit=1) == [other]
    assert [e.node for e in await listed(uow_factory, "n-1")] == ["n-1"]
    assert await listed(uow_factory, "n-2") == []
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.node_events.record(refused("x", 1, node="missing"), 50)


async def test_a_node_keeps_only_its_most_recent_events(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    for i in range(6):  # six sources, one minute apart
        await record(uow_factory, refused(f"10.0.0.{i}", i), keep=3)
    await record(uow_factory, refused("10.9.9.9", 1, node="n-1"), keep=3)
    assert [e.source for e in await listed(uow_factory, "n-0")] == [
        "10.0.0.5",
        "10.0.0.4",
        "10.0.0.3",
    ]
    await record(uow_factory, refused("10.0.0.3", 10), keep=3)  # seen again: it stays
    await record(uow_factory, refused("10.0.0.6", 11), keep=3)
    assert [e.source for e in await listed(uow_factory, "n-0")] == [
        "10.0.0.6",
        "10.0.0.3",
        "10.0.0.5",
    ]
    assert len(await listed(uow_factory, "n-1")) == 1  # another node's are not counted


async def test_racing_records_of_one_source_both_count(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)

    def rec(minutes: float) -> Callable[[UnitOfWork], Awaitable[NodeEvent]]:
        return lambda uow: uow.node_events.record(refused("192.0.2.7", minutes), 50)

    await racing(uow_factory, rec(1), rec(2), rec(3))
    [stored] = await listed(uow_factory, "n-0")
    assert (stored.count, stored.last_at) == (3, at(3))
