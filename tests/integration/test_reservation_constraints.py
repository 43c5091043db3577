"""The reservation tables' constraints, whoever writes (docs/persistence.md, "Reservations live
in constraints too"): raw SQL that skips the repository, and two real concurrent transactions,
still cannot double-book a GPU, reserve a GPU its node does not have, or shrink a node under a
reservation (migration 0032: each member's GPUs are a set of GPU numbers inside its node's
window; migration 0037: claimed as bits of one mask a window, which refuses a bit twice)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres.connect import plain_url
from tests.support.reservation_rows import two_connections

pytestmark = pytest.mark.integration

MEMBER = (
    "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
    "node_slot, node_gpus, gpus) "
    "SELECT $1, $2, 'main', n.name, 0, 0, n.slot, n.gpus, "
    "       int4multirange(int4range(n.slot * 64 + $4, n.slot * 64 + $5)) "
    "FROM nodes n WHERE n.name = $3"
)


@pytest.fixture
async def conns(pg_url: str) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Connection]]:
    async with two_connections(pg_url) as both:
        yield both


async def waiting_on_a_lock(watcher: asyncpg.Connection, pid: int) -> None:
    """Until the backend ``pid`` waits for another transaction (a condition, not a sleep)."""
    while not await watcher.fetchval(  # noqa: ASYNC110 (polls the database)
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid
    ):
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("first_commits", [True, False])
async def test_two_transactions_reserving_one_gpu_raw_one_wins(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, first_commits: bool
) -> None:
    one, two = conns
    first, second = one.transaction(), two.transaction()
    await first.start()
    await one.execute(MEMBER, "att-1", 0, "n-0", 0, 4)  # GPUs 0-3, not committed yet
    await second.start()
    # GPUs 3-4: overlaps GPU 3; no counters touched, so no node row lock to queue on
    racer = asyncio.create_task(two.execute(MEMBER, "att-2", 0, "n-0", 3, 5))
    watcher = await asyncpg.connect(plain_url(pg_url))
    try:
        await asyncio.wait_for(waiting_on_a_lock(watcher, two.get_server_pid()), 30)
    finally:
        await watcher.close()
    if first_commits:
        await first.commit()
        with pytest.raises(asyncpg.UniqueViolationError):
            await racer
        await second.rollback()
    else:
        await first.rollback()
        await racer  # the first never happened: the second gets the GPUs
        await second.commit()
    held = await one.fetch("SELECT attempt_id FROM reservation_members")
    assert [r["attempt_id"] for r in held] == ["att-1" if first_commits else "att-2"]


@pytest.mark.parametrize("first_commits", [True, False])
async def test_two_transactions_reserving_disjoint_gpus_of_one_node_both_hold_them(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, first_commits: bool
) -> None:
    """A node's claims are one row (migration 0037): the second writer waits for the first
    transaction's end, then ORs its own bits in beside the first's (or alone)."""
    one, two = conns
    first, second = one.transaction(), two.transaction()
    await first.start()
    await one.execute(MEMBER, "att-1", 0, "n-0", 0, 4)  # GPUs 0-3 and, below, 4-7
    await one.execute(MEMBER, "att-1", 1, "n-1", 0, 1)
    await second.start()
    racer = asyncio.create_task(two.execute(MEMBER, "att-2", 0, "n-0", 4, 8))
    watcher = await asyncpg.connect(plain_url(pg_url))
    try:
        await asyncio.wait_for(waiting_on_a_lock(watcher, two.get_server_pid()), 30)
    finally:
        await watcher.close()
    if first_commits:
        await first.commit()
    else:
        await first.rollback()
    await racer
    await second.commit()
    held = await one.fetch("SELECT attempt_id, member FROM reservation_members ORDER BY 1, 2")
    expected = [("att-1", 0), ("att-1", 1)] if first_commits else []
    assert [tuple(r) for r in held] == [*expected, ("att-2", 0)]
    masks = "SELECT bits FROM gpu_claims c JOIN nodes n ON n.slot = c.slot WHERE n.name = $1"
    assert await one.fetchval(masks, "n-0") == (0xFF if first_commits else 0xF0)
    # and either one's GPUs are refused to a third statement
    with pytest.raises(asyncpg.UniqueViolationError):
        await one.execute(MEMBER, "att-1", 2, "n-0", 7, 8)


async def test_other_nodes_and_disjoint_gpus_do_not_conflict(
    conns: tuple[asyncpg.Connection, asyncpg.Connection],
) -> None:
    one, _ = conns
    await one.execute(MEMBER, "att-1", 0, "n-0", 0, 4)
    await one.execute(MEMBER, "att-1", 1, "n-1", 0, 4)  # the same indexes on another node
    await one.execute(MEMBER, "att-2", 0, "n-0", 4, 8)
    with pytest.raises(asyncpg.UniqueViolationError):
        await one.execute(MEMBER, "att-2", 1, "n-0", 3, 4)


@pytest.mark.parametrize(
    ("sql", "gpus", "error"),
    [
        pytest.param(MEMBER, (7, 9), asyncpg.CheckViolationError, id="gpu-8-of-8"),
        pytest.param(MEMBER, (-1, 1), asyncpg.CheckViolationError, id="negative-gpu"),
        pytest.param(  # n-1's GPU numbers claimed for a member on n-0
            "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
            "node_slot, node_gpus, gpus) SELECT $1, $2, 'main', 'n-0', 0, 0, n.slot, n.gpus, "
            "int4multirange(int4range(n.slot * 64 + $4, n.slot * 64 + $5)) "
            "FROM nodes n WHERE n.name = 'n-1' AND $3 <> ''",
            (0, 1),
            asyncpg.ForeignKeyViolationError,
            id="another-nodes-window",
        ),
        pytest.param(  # a GPU count the node does not have, to pass the check
            MEMBER.replace("n.gpus,", "64,"),
            (8, 9),
            asyncpg.ForeignKeyViolationError,
            id="forged-gpu-count",
        ),
    ],
)
async def test_a_gpu_the_node_does_not_have_is_refused(
    conns: tuple[asyncpg.Connection, asyncpg.Connection],
    sql: str,
    gpus: tuple[int, int],
    error: type[Exception],
) -> None:
    one, _ = conns
    with pytest.raises(error):
        await one.execute(sql, "att-1", 0, "n-0", *gpus)
    assert await one.fetchval("SELECT count(*) FROM reservation_members") == 0


async def test_a_node_cannot_lose_a_reserved_gpu_or_move_its_window(
    conns: tuple[asyncpg.Connection, asyncpg.Connection],
) -> None:
    one, _ = conns
    await one.execute(MEMBER, "att-1", 0, "n-0", 4, 6)  # GPUs 4 and 5
    with pytest.raises(asyncpg.CheckViolationError):
        await one.execute("UPDATE nodes SET gpus = 5 WHERE name = 'n-0'")
    with pytest.raises(asyncpg.CheckViolationError):
        await one.execute("UPDATE nodes SET slot = slot + 100 WHERE name = 'n-0'")
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await one.execute("DELETE FROM nodes WHERE name = 'n-0'")
    # growing it, or shrinking it above the reserved GPUs, follows onto the member
    await one.execute("UPDATE nodes SET gpus = 6 WHERE name = 'n-0'")
    assert await one.fetchval("SELECT node_gpus FROM reservation_members") == 6
    # the reservation's end takes its GPUs with it
    await one.execute("DELETE FROM reservations WHERE attempt_id = 'att-1'")
    await one.execute(MEMBER, "att-2", 0, "n-0", 4, 6)
    await one.execute("UPDATE nodes SET gpus = 5 WHERE name = 'n-1'")  # nothing reserved there
