"""Contract: the node backend's ports (domain/node_ports.py), part 1 — enrollment (join
tokens used once, credentials retired keeping the earlier limit) and control links (sessions,
heartbeats, expiry, fencing). The launch ledger's contract is in test_node_launches.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from domain.enrollment import JoinToken, NodeCredential
from domain.errors import Conflict, NotFound, TunePlaneError
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Team
from domain.gpus import GpuDevice, GpuInventory
from domain.node_ports import NodeLink
from domain.node_protocol import NodeCapacity
from domain.unit_of_work import UnitOfWork, UnitOfWorkFactory
from tests.contract.builders import T0, at

pytestmark = pytest.mark.contract

POOL = Pool("n", "main", "node", 8, 96, 1_048_576, "h200")
CAP = NodeCapacity(8, "h200", 96.0, 1_048_576)
T = TypeVar("T")


async def setup_fleet(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.policy.put_team(Team("t"))
        await uow.policy.put_queue(Queue("default", "t"))
        await uow.fleet.put_pool(POOL)
        for i in range(3):
            await uow.fleet.put_node(Node(f"n-{i}", "n"))
        await uow.commit()


async def racing(
    uow_factory: UnitOfWorkFactory, *calls: Callable[[UnitOfWork], Awaitable[T]]
) -> list[T]:
    """Run each call in its own unit of work, all begun before any call runs, then commit."""
    return await _race(uow_factory, calls, settle=False)


async def settled(
    uow_factory: UnitOfWorkFactory, *calls: Callable[[UnitOfWork], Awaitable[object]]
) -> list[str]:
    """As ``racing``, but a call that raises a TunePlaneError has its unit of work rolled back:
    each result is "done", or the name of the error that refused it."""
    return await _race(uow_factory, calls, settle=True)


async def _race(
    uow_factory: UnitOfWorkFactory,
    calls: tuple[Callable[[UnitOfWork], Awaitable[Any]], ...],
    settle: bool,
) -> list[Any]:
    began = 0
    all_began = asyncio.Event()

    async def one(call: Callable[[UnitOfWork], Awaitable[Any]]) -> Any:
        nonlocal began
        try:
            async with uow_factory() as uow:
                await uow.fleet.pools()  # the transaction is open
                began += 1
                if began == len(calls):
                    all_began.set()
                await all_began.wait()
                result = await call(uow)
                await uow.commit()
        except TunePlaneError as exc:
            if not settle:
                raise
            return type(exc).__name__
        return "done" if settle else result

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def blocked(request: pytest.FixtureRequest, task: asyncio.Task[object]) -> None:
    """Return once ``task`` waits for a lock another unit of work holds."""
    if request.node.callspec.params["uow_factory"] == "postgres":
        engine: AsyncEngine = request.getfixturevalue("pg_engine")
        waiting = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        for _ in range(1000):
            async with engine.connect() as conn:
                if (await conn.execute(waiting)).scalar():
                    return
            assert not task.done(), "it did not wait"
            await asyncio.sleep(0.005)
        raise AssertionError("it never waited for the lock")
    for _ in range(50):  # the in-memory database: waits are on asyncio events
        await asyncio.sleep(0)
    assert not task.done(), "it did not wait"


# -- enrollment ---------------------------------------------------------------------------


def a_join_token(secret: str = "j1", **kw: object) -> JoinToken:
    values: dict[str, object] = {
        "token_hash": f"hash-{secret}",
        "pool": "n",
        "node_name": None,
        "created_by": "alice",
        "created_at": T0,
        "expires_at": at(60),
    }
    return JoinToken(**(values | kw))  # type: ignore[arg-type]


async def test_a_join_token_is_used_once(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    token = a_join_token(node_name="n-0")
    async with uow_factory() as uow:
        await uow.enrollment.add_join_token(token)
        await uow.enrollment.add_join_token(a_join_token("j2"))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.enrollment.join_token(token.token_hash) == token
        assert await uow.enrollment.join_token("hash-missing") is None
        assert await uow.enrollment.use_join_token("hash-missing", "n-0", at(1)) is False
        assert await uow.enrollment.use_join_token(token.token_hash, "n-0", at(1)) is True
        assert await uow.enrollment.use_join_token(token.token_hash, "n-1", at(2)) is False
        await uow.commit()
    async with uow_factory() as uow:
        used = replace(token, used_at=at(1), used_by="n-0")
        assert await uow.enrollment.join_token(token.token_hash) == used
        assert await uow.enrollment.use_join_token(token.token_hash, "n-1", at(3)) is False
        with pytest.raises(Conflict):
            await uow.enrollment.add_join_token(token)


async def test_an_expired_join_token_is_refused(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.enrollment.add_join_token(a_join_token("a", expires_at=at(10)))
        await uow.enrollment.add_join_token(a_join_token("b", expires_at=at(10)))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.enrollment.use_join_token("hash-a", "n-0", at(10)) is False  # at expiry
        assert await uow.enrollment.use_join_token("hash-b", "n-0", at(9.9)) is True
        await uow.commit()
    async with uow_factory() as uow:
        unused = await uow.enrollment.join_token("hash-a")
        assert unused is not None and unused.used_at is None


async def test_a_join_token_needs_its_pool(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.enrollment.add_join_token(a_join_token(pool="missing"))


async def test_concurrent_uses_of_one_join_token_exactly_one_wins(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.enrollment.add_join_token(a_join_token())
        await uow.commit()

    def use(node: str) -> Callable[[UnitOfWork], Awaitable[bool]]:
        return lambda uow: uow.enrollment.use_join_token("hash-j1", node, at(1))

    outcomes = await racing(uow_factory, use("n-0"), use("n-1"), use("n-2"))
    assert sorted(outcomes) == [False, False, True]
    async with uow_factory() as uow:
        token = await uow.enrollment.join_token("hash-j1")
    assert token is not None and token.used_by == ("n-0", "n-1", "n-2")[outcomes.index(True)]


def a_credential(cid: str, node: str = "n-0", minutes: float = 0, **kw: object) -> NodeCredential:
    return NodeCredential(cid, node, f"hash-{cid}", at(minutes), **kw)  # type: ignore[arg-type]


async def test_credentials_round_trip_oldest_first(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    creds = [a_credential("c2", minutes=2), a_credential("c1", minutes=1), a_credential("x", "n-1")]
    async with uow_factory() as uow:
        for c in creds:
            await uow.enrollment.add_credential(c)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.enrollment.credentials("n-0") == [creds[1], creds[0]]
        assert await uow.enrollment.credentials("n-2") == []
        assert await uow.enrollment.credential("hash-c2") == creds[0]
        assert await uow.enrollment.credential("hash-missing") is None
        with pytest.raises(Conflict):  # same hash
            await uow.enrollment.add_credential(replace(creds[0], id="c9"))
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.enrollment.add_credential(a_credential("c3", node="missing"))


async def test_retiring_credentials_keeps_the_earlier_limit(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.enrollment.add_credential(a_credential("c1", valid_until=at(5)))
        await uow.enrollment.add_credential(a_credential("c2", minutes=1))
        await uow.enrollment.add_credential(a_credential("c3", minutes=2))
        await uow.enrollment.add_credential(a_credential("other", "n-1"))
        await uow.enrollment.retire_credentials("n-0", "c3", at(10))
        await uow.commit()

    async def limits(node: str) -> dict[str, datetime | None]:
        async with uow_factory() as uow:
            return {c.id: c.valid_until for c in await uow.enrollment.credentials(node)}

    assert await limits("n-0") == {"c1": at(5), "c2": at(10), "c3": None}
    async with uow_factory() as uow:
        await uow.enrollment.retire_credentials("n-0", "c3", at(3))  # earlier: it applies
        await uow.commit()
    assert await limits("n-0") == {"c1": at(3), "c2": at(3), "c3": None}
    assert await limits("n-1") == {"other": None}


# -- control links ------------------------------------------------------------------------


async def open_link(
    uow_factory: UnitOfWorkFactory, node: str, minutes: float = 0, address: str = ""
) -> NodeLink:
    async with uow_factory() as uow:
        link = await uow.links.open(
            node, "gw-1", CAP, address or f"10.0.0.{node[-1]}", "1.0", at(minutes)
        )
        await uow.commit()
    return link


async def node_state(uow_factory: UnitOfWorkFactory, name: str) -> Node | None:
    async with uow_factory() as uow:
        return await uow.fleet.node(name)


async def test_open_raises_the_session_and_marks_the_node_connected(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.fleet.put_node(Node("n-0", "n", SchedState.CORDONED, Connectivity.LOST))
        await uow.commit()
    first = await open_link(uow_factory, "n-0", 1)
    assert first == NodeLink("n-0", 1, "gw-1", at(1), at(1), CAP, "10.0.0.0", "1.0", 1)
    assert await node_state(uow_factory, "n-0") == Node("n-0", "n", SchedState.CORDONED)
    async with uow_factory() as uow:
        second = await uow.links.open("n-0", "gw-2", replace(CAP, gpus=7), "10.9.9.9", "1.1", at(2))
        await uow.commit()
    assert second == NodeLink(
        "n-0", 2, "gw-2", at(2), at(2), replace(CAP, gpus=7), "10.9.9.9", "1.1", 1
    )
    await open_link(uow_factory, "n-1", 3)
    async with uow_factory() as uow:
        assert await uow.links.get("n-0") == second
        assert await uow.links.get("n-2") is None
        assert [link.node for link in await uow.links.all()] == ["n-0", "n-1"]
        with pytest.raises(NotFound):
            await uow.links.open("missing", "gw-1", CAP, "", "", at(4))


H200_X2 = GpuInventory(
    (
        GpuDevice(
            0, "GPU-6f2c1f0e-5a1b-4c3d-9e8f-0a1b2c3d4e5f", "NVIDIA H200", 143771, nvlink=True
        ),
        GpuDevice(1, "GPU-7a3d2e1f-6b2c-4d4e-8f9a-1b2c3d4e5f60", "NVIDIA H200", 143771, mig=True),
    ),
    "580.159.03",
    "13.0",
    "nvml",
)


async def test_a_link_keeps_the_gpu_inventory_its_daemon_reported(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """The inventory round-trips whole; a later stream without one (an older daemon) leaves
    none (unknown), not the earlier stream's."""
    await setup_fleet(uow_factory)
    reported = replace(CAP, gpus=2, gpu_inventory=H200_X2)
    async with uow_factory() as uow:
        opened = await uow.links.open("n-0", "gw-1", reported, "10.0.0.1", "1.0", at(1))
        await uow.commit()
    assert opened.capacity == reported
    async with uow_factory() as uow:
        [link] = await uow.links.all()
        assert link.capacity.gpu_inventory == H200_X2
        await uow.links.open("n-0", "gw-1", CAP, "10.0.0.1", "0.9", at(2))
        await uow.commit()
    async with uow_factory() as uow:
        again = await uow.links.get("n-0")
    assert again is not None and again.capacity.gpu_inventory is None


async def test_a_stale_session_neither_closes_nor_beats(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)
    await open_link(uow_factory, "n-0", 2)  # session 2: the daemon reconnected
    await open_link(uow_factory, "n-1", 2)
    async with uow_factory() as uow:
        await uow.links.beat([("n-0", 1, at(5)), ("n-1", 1, at(6))])
        await uow.links.beat([])
        assert await uow.links.close("n-0", 1, at(7)) is False
        await uow.commit()
    async with uow_factory() as uow:
        n0, n1 = await uow.links.all()
        assert (n0.session, n0.heartbeat_at, n1.heartbeat_at) == (2, at(2), at(6))
    assert (await node_state(uow_factory, "n-0")) == Node("n-0", "n")
    async with uow_factory() as uow:
        assert await uow.links.close("n-0", 2, at(8)) is True
        await uow.commit()
    assert await node_state(uow_factory, "n-0") == Node(
        "n-0", "n", connectivity=Connectivity.DISCONNECTED
    )


async def test_expire_disconnects_only_silent_connected_linked_nodes(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        await uow.fleet.put_node(Node("n-3", "n"))
        await uow.commit()
    await open_link(uow_factory, "n-0", 1)  # silent
    await open_link(uow_factory, "n-1", 10)  # heard recently
    await open_link(uow_factory, "n-3", 1)  # silent, but already disconnected
    async with uow_factory() as uow:
        await uow.links.close("n-3", 1, at(2))
        await uow.commit()
    # n-2 has no link (a local backend's node): never touched
    async with uow_factory() as uow:
        assert await uow.links.expire(at(5), at(11)) == ["n-0"]
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.links.expire(at(5), at(12)) == []
        states = {n.name: n.connectivity for n in await uow.fleet.nodes()}
    assert states == {
        "n-0": Connectivity.DISCONNECTED,
        "n-1": Connectivity.CONNECTED,
        "n-2": Connectivity.CONNECTED,
        "n-3": Connectivity.DISCONNECTED,
    }


async def test_fence_raises_the_epoch(uow_factory: UnitOfWorkFactory) -> None:
    await setup_fleet(uow_factory)
    async with uow_factory() as uow:
        assert await uow.links.fence("n-0") == 2  # a node without a link has an epoch too
        assert await uow.links.fence("n-0") == 3
        with pytest.raises(NotFound):
            await uow.links.fence("missing")
        await uow.commit()
    link = await open_link(uow_factory, "n-0", 1)
    assert link.epoch == 3
    async with uow_factory() as uow:
        assert await uow.links.fence("n-0") == 4
        await uow.commit()
    async with uow_factory() as uow:
        found = await uow.links.get("n-0")
        assert found is not None and found.epoch == 4
        other = await uow.links.open("n-1", "gw", CAP, "a", "v", at(1))
        assert other.epoch == 1


async def reconnect_while(
    uow_factory: UnitOfWorkFactory,
    request: pytest.FixtureRequest,
    call: Callable[[UnitOfWork], Awaitable[T]],
) -> T:
    """Run ``call`` in its own unit of work while n-0 reconnects (its new session open but not
    committed); return what ``call`` returned once both committed."""

    async def run() -> T:
        async with uow_factory() as uow:
            result = await call(uow)
            await uow.commit()
        return result

    async with uow_factory() as reconnect:
        await reconnect.links.open("n-0", "gw-2", CAP, "10.0.0.9", "1.0", at(20))
        task: asyncio.Task[T] = asyncio.create_task(run())
        await blocked(request, task)
        await reconnect.commit()
    return await task


async def test_closing_the_old_session_during_a_reconnect_leaves_the_node_connected(
    uow_factory: UnitOfWorkFactory, request: pytest.FixtureRequest
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)
    closed = await reconnect_while(
        uow_factory, request, lambda uow: uow.links.close("n-0", 1, at(21))
    )
    assert closed is False
    assert await node_state(uow_factory, "n-0") == Node("n-0", "n")


async def test_expiry_during_a_reconnect_leaves_the_node_connected(
    uow_factory: UnitOfWorkFactory, request: pytest.FixtureRequest
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)  # silent since minute 1
    expired = await reconnect_while(
        uow_factory, request, lambda uow: uow.links.expire(at(10), at(21))
    )
    assert expired == []
    assert await node_state(uow_factory, "n-0") == Node("n-0", "n")


async def test_revive_reconnects_expired_nodes_whose_stream_is_still_current(
    uow_factory: UnitOfWorkFactory,
) -> None:
    await setup_fleet(uow_factory)
    await open_link(uow_factory, "n-0", 1)
    await open_link(uow_factory, "n-1", 1)
    await open_link(uow_factory, "n-1", 2)  # n-1 reconnected: session 2
    await open_link(uow_factory, "n-2", 1)
    async with uow_factory() as uow:
        assert await uow.links.expire(at(5), at(11)) == ["n-0", "n-1", "n-2"]
        await uow.fleet.put_node(Node("n-2", "n", SchedState.CORDONED, Connectivity.LOST))
        await uow.commit()
    async with uow_factory() as uow:  # n-1's session 1 is stale; n-2 was fenced
        revived = await uow.links.revive([("n-0", 1), ("n-1", 1), ("n-2", 1)], at(12))
        assert await uow.links.revive([], at(12)) == []
        await uow.commit()
    assert revived == ["n-0"]
    async with uow_factory() as uow:
        states = {n.name: n.connectivity for n in await uow.fleet.nodes()}
        assert await uow.links.revive([("n-0", 1)], at(13)) == []  # already connected
    assert states == {
        "n-0": Connectivity.CONNECTED,
        "n-1": Connectivity.DISCONNECTED,
        "n-2": Connectivity.LOST,
    }
