"""Contract: pools, nodes and profiles (FleetRepository); users, teams and queues
(PolicyRepository); the leader lease."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import asyncpg
import pytest

from adapters.memory.lease import MemoryLeaderLease, MemoryLeases
from adapters.postgres.connect import plain_url
from adapters.postgres.lease import PostgresLeaderLease, lease_key
from domain.auth import Role, User
from domain.coordination_ports import LeaderLease
from domain.errors import NotFound
from domain.fleet import Connectivity, Node, Pool, Queue, SchedState, Team
from domain.requests import Profile
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import at

pytestmark = pytest.mark.contract

GPU = Pool("a", "main", "local", 8, 96, 1_048_576, "h200", "eight H200s")
CPU = Pool("cpu", "main", "local", 0, 16.5, 65_536)


async def test_pools_round_trip_by_name_and_update(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == []
        await uow.fleet.put_pool(GPU)
        await uow.fleet.put_pool(CPU)
        await uow.commit()
    changed = replace(GPU, description="renamed", fleet="other", gpus_per_node=4)
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == [GPU, CPU]
        await uow.fleet.put_pool(changed)  # no reservations: any change goes
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == [changed, CPU]
        assert (await uow.fleet.pools())[1].cpus_per_node == 16.5


async def test_a_pools_unavailable_mark_is_kept_by_put_pool(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Only set_pool_unavailable writes it (the capacity sync); a fleet file applied again
    (put_pool) keeps it, and "" clears it."""
    async with uow_factory() as uow:
        await uow.fleet.put_pool(CPU)
        await uow.fleet.set_pool_unavailable("cpu", "Slurm has no partition cpu; fix: …")
        await uow.commit()
    marked = replace(CPU, unavailable="Slurm has no partition cpu; fix: …")
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == [marked]
        await uow.fleet.put_pool(replace(CPU, description="again"))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == [replace(marked, description="again")]
        with pytest.raises(NotFound):
            await uow.fleet.set_pool_unavailable("nope", "x")
        await uow.fleet.set_pool_unavailable("cpu", "")
        await uow.commit()
    async with uow_factory() as uow:
        assert (await uow.fleet.pools())[0].unavailable == ""


async def test_nodes_round_trip_by_pool_then_name(uow_factory: UnitOfWorkFactory) -> None:
    nodes = [
        Node("b-2", "a"),
        Node("z-1", "a", SchedState.CORDONED),
        Node("a-9", "cpu", connectivity=Connectivity.DISCONNECTED),
        Node("a-1", "a"),
    ]
    async with uow_factory() as uow:
        await uow.fleet.put_pool(GPU)
        await uow.fleet.put_pool(CPU)
        for node in nodes:
            await uow.fleet.put_node(node)
        await uow.commit()
    async with uow_factory() as uow:
        assert [n.name for n in await uow.fleet.nodes()] == ["a-1", "b-2", "z-1", "a-9"]
        assert await uow.fleet.node("z-1") == nodes[1]
        assert await uow.fleet.node("a-9") == nodes[2]
        assert await uow.fleet.node("missing") is None
        await uow.fleet.put_node(Node("z-1", "a", SchedState.DRAINING, Connectivity.LOST))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.node("z-1") == Node(
            "z-1", "a", SchedState.DRAINING, Connectivity.LOST
        )
        assert len(await uow.fleet.nodes()) == 4
        assert await uow.fleet.node_counts() == {"a": 3, "cpu": 1}  # whatever their states
        await uow.fleet.put_node(Node("c-1", "cpu"))  # this transaction's own writes count
        assert await uow.fleet.node_counts() == {"a": 3, "cpu": 2}


async def test_a_node_needs_its_pool(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.fleet.put_node(Node("n-1", "missing"))


async def test_set_node_state_changes_only_what_is_given(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.fleet.put_pool(GPU)
        await uow.fleet.put_node(Node("n-1", "a"))
        cordoned = await uow.fleet.set_node_state("n-1", sched=SchedState.CORDONED)
        assert cordoned == Node("n-1", "a", SchedState.CORDONED, Connectivity.CONNECTED)
        cut = await uow.fleet.set_node_state("n-1", connectivity=Connectivity.DISCONNECTED)
        assert cut == Node("n-1", "a", SchedState.CORDONED, Connectivity.DISCONNECTED)
        assert await uow.fleet.set_node_state("n-1") == cut
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.node("n-1") == cut
        with pytest.raises(NotFound):
            await uow.fleet.set_node_state("missing", sched=SchedState.DRAINING)


async def test_profiles_are_created_or_replaced(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.fleet.put_profile(Profile("small", "h200:1", "one GPU"))
        await uow.fleet.put_profile(Profile("big", "a/h200:16"))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.fleet.profiles() == [
            Profile("big", "a/h200:16"),
            Profile("small", "h200:1", "one GPU"),
        ]
        await uow.fleet.put_profile(Profile("small", "h200:2", "two"))
        await uow.commit()
    async with uow_factory() as uow:
        assert (await uow.fleet.profiles())[1] == Profile("small", "h200:2", "two")


async def test_nothing_is_kept_without_commit(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.fleet.put_pool(GPU)
        await uow.fleet.put_node(Node("n-1", "a"))
        await uow.policy.put_team(Team("t"))
    async with uow_factory() as uow:
        assert await uow.fleet.pools() == []
        assert await uow.fleet.nodes() == []
        assert await uow.policy.teams() == []


# -- policy -----------------------------------------------------------------------------------


async def test_users_teams_and_queues_round_trip(uow_factory: UnitOfWorkFactory) -> None:
    bob = User("bob", Role.MEMBER, ("ml", "infra"), created_at=at(1))
    alice = User("alice", Role.ADMIN, (), created_at=at(0), disabled=True)
    async with uow_factory() as uow:
        await uow.policy.put_team(Team("ml"))
        await uow.policy.put_team(Team("infra"))
        await uow.policy.put_team(Team("ml"))  # already there: left as is
        await uow.policy.put_user(bob)
        await uow.policy.put_user(alice)
        await uow.policy.put_queue(Queue("q-ml", "ml", priority=10, gpu_quota=16))
        await uow.policy.put_queue(Queue("default", "infra", job_quota=0))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.policy.teams() == [Team("infra"), Team("ml")]
        assert await uow.policy.user("bob") == replace(bob, teams=("infra", "ml"))
        assert await uow.policy.users() == [alice, replace(bob, teams=("infra", "ml"))]
        assert await uow.policy.user("nobody") is None
        assert await uow.policy.queue("q-ml") == Queue("q-ml", "ml", 10, 16, None)
        assert await uow.policy.queue("nope") is None
        assert [q.name for q in await uow.policy.queues()] == ["default", "q-ml"]
        # updates: the user's teams are replaced, the queue's settings too
        await uow.policy.put_user(replace(bob, role=Role.VIEWER, teams=("ml",), disabled=True))
        await uow.policy.put_queue(Queue("q-ml", "infra", priority=-5, job_quota=3))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.policy.user("bob") == User(
            "bob", Role.VIEWER, ("ml",), created_at=at(1), disabled=True
        )
        assert await uow.policy.queue("q-ml") == Queue("q-ml", "infra", -5, None, 3)
        await uow.policy.put_user(replace(bob, teams=()))
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.policy.user("bob")
        assert stored is not None and stored.teams == ()


async def test_unknown_teams_are_not_found(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.policy.put_team(Team("ml"))
        with pytest.raises(NotFound):
            await uow.policy.put_user(User("bob", Role.MEMBER, ("ml", "ghost"), at(0)))
        assert await uow.policy.user("bob") is None
    async with uow_factory() as uow:
        with pytest.raises(NotFound):
            await uow.policy.put_queue(Queue("q", "ghost"))
        assert await uow.policy.queue("q") is None


# -- the leader lease -------------------------------------------------------------------------

Kill = Callable[[LeaderLease], Awaitable[None]]


@pytest.fixture(params=["memory", "postgres"])
def lease_db(request: pytest.FixtureRequest) -> str | None:
    """None for the in-memory leases, else the URL of a fresh PostgreSQL database."""
    if request.param == "memory":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def leases(
    lease_db: str | None,
) -> AsyncIterator[tuple[Callable[[], LeaderLease], Kill]]:
    """(make a lease on one shared database, kill a holder's session as a crash would)."""
    made: list[LeaderLease] = []
    if lease_db is None:
        shared = MemoryLeases()

        def memory() -> LeaderLease:
            made.append(MemoryLeaderLease(shared, "scheduler"))
            return made[-1]

        async def crash(lease: LeaderLease) -> None:
            assert isinstance(lease, MemoryLeaderLease)
            lease.crash()

        yield memory, crash
        return
    url = lease_db

    def postgres() -> LeaderLease:
        made.append(PostgresLeaderLease(url, "scheduler", timeout=5.0))
        return made[-1]

    async def terminate(lease: LeaderLease) -> None:
        assert isinstance(lease, PostgresLeaderLease)
        conn = await asyncpg.connect(plain_url(url))
        try:
            # with a timeout, pg_terminate_backend waits until the backend has exited (and
            # released its locks); without, it returns once the signal is sent, and the next
            # acquire could still find the lock held (a flake under load)
            killed = await conn.fetchval(
                "SELECT count(pg_terminate_backend(l.pid, 10000)) FROM pg_locks l "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        finally:
            await conn.close()
        assert killed == 1

    try:
        yield postgres, terminate
    finally:
        for lease in made:
            await lease.release()


async def test_one_holder_at_a_time_until_release(
    leases: tuple[Callable[[], LeaderLease], Kill],
) -> None:
    make, _ = leases
    first, second = make(), make()
    assert await first.acquire()
    assert await first.acquire()  # still the leader
    assert not await second.acquire()
    assert not await second.acquire()
    await first.release()
    await first.release()  # idempotent
    assert await second.acquire()
    assert not await first.acquire()


async def test_a_dead_holder_loses_the_lease(
    leases: tuple[Callable[[], LeaderLease], Kill],
) -> None:
    make, kill = leases
    first, second = make(), make()
    assert await first.acquire()
    assert not await second.acquire()
    await kill(first)
    assert await second.acquire()
    assert not await first.acquire()  # it notices, reconnects, and finds the lease taken
    await second.release()
    assert await first.acquire()


def test_lease_keys_are_fixed_64_bit_numbers() -> None:
    assert lease_key("scheduler") == lease_key("scheduler")
    assert lease_key("scheduler") != lease_key("other")
    assert -(2**63) <= lease_key("scheduler") < 2**63


async def test_an_unreachable_database_means_not_leader_without_blocking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = PostgresLeaderLease("postgresql://tp@127.0.0.1:9/none", timeout=2.0)
    with caplog.at_level(logging.DEBUG, "tuneplane.lease"):
        for _ in range(3):
            assert not await lease.acquire()
    await lease.release()
    # said once per outage, not at every try (a cut-off API tries every few seconds)
    said = [r for r in caplog.records if "cannot ask the database" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "3 tries so far" in said[-1].getMessage()
