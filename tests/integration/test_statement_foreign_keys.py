"""The foreign keys kept by statement triggers (migration 0036; docs/persistence.md, "Foreign
keys checked per statement") under two real concurrent transactions, raw SQL: a parent deleted
while a child is inserted in another transaction never leaves an orphan. Whichever comes first
waits for the other: a child inserted first makes the delete cascade onto it (``ON DELETE
CASCADE``) or refuses the delete (``nodes``, ``NO ACTION``); a delete first refuses the child,
unless it rolls back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres.engine import plain_url
from tests.support.reservation_rows import AT, two_connections

pytestmark = pytest.mark.integration

ATTEMPT = (
    "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at) "
    "VALUES ('att-new', 'job-att-1', 2, 'launching', $1, $1)"
)
RES_MEMBER = (
    "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
    "node_slot, node_gpus, gpus) "
    "SELECT 'att-2', 0, 'main', n.name, 0, 0, n.slot, n.gpus, "
    "       int4multirange(int4range(n.slot * 64, n.slot * 64 + 1)) "
    "FROM nodes n WHERE n.name = 'n-1'"
)


@pytest.fixture
async def conns(pg_url: str) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Connection]]:
    async with two_connections(pg_url) as both:
        yield both


async def blocked(pg_url: str, conn: asyncpg.Connection) -> None:
    """Until ``conn``'s backend waits for another transaction (a condition, not a sleep)."""
    watcher = await asyncpg.connect(plain_url(pg_url))
    try:
        while not await watcher.fetchval(  # noqa: ASYNC110 (polls the database)
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
            conn.get_server_pid(),
        ):
            await asyncio.sleep(0.01)
    finally:
        await watcher.close()


@pytest.mark.parametrize("child_commits", [True, False])
async def test_a_child_inserted_first_is_cascaded_by_the_delete_that_waited(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, child_commits: bool
) -> None:
    child, parent = conns
    inserting = child.transaction()
    await inserting.start()
    await child.execute(ATTEMPT, AT)  # locks job-att-1 FOR KEY SHARE, not committed
    deleting = parent.transaction()
    await deleting.start()
    delete = asyncio.create_task(parent.execute("DELETE FROM jobs WHERE id = 'job-att-1'"))
    await asyncio.wait_for(blocked(pg_url, parent), 30)
    await (inserting.commit() if child_commits else inserting.rollback())
    await delete
    await deleting.commit()
    assert await child.fetchval("SELECT count(*) FROM attempts WHERE job_id = 'job-att-1'") == 0
    assert await child.fetchval("SELECT count(*) FROM attempts") == 1  # att-2's


@pytest.mark.parametrize("delete_commits", [True, False])
async def test_a_child_of_a_parent_being_deleted_waits_and_is_refused(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, delete_commits: bool
) -> None:
    child, parent = conns
    deleting = parent.transaction()
    await deleting.start()
    await parent.execute("DELETE FROM jobs WHERE id = 'job-att-1'")  # not committed
    inserting = child.transaction()
    await inserting.start()
    insert = asyncio.create_task(child.execute(ATTEMPT, AT))
    await asyncio.wait_for(blocked(pg_url, child), 30)
    if delete_commits:
        await deleting.commit()
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_attempts_job_id_jobs"):
            await insert
        await inserting.rollback()
        assert await child.fetchval("SELECT count(*) FROM attempts") == 1
    else:
        await deleting.rollback()
        await insert  # the delete never happened: the parent is there
        await inserting.commit()
        assert await child.fetchval("SELECT count(*) FROM attempts") == 3


async def test_a_node_cannot_go_under_a_member_reserved_meanwhile(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str
) -> None:
    child, parent = conns
    inserting = child.transaction()
    await inserting.start()
    await child.execute(RES_MEMBER)  # locks n-1 FOR KEY SHARE, not committed
    deleting = parent.transaction()
    await deleting.start()
    delete = asyncio.create_task(parent.execute("DELETE FROM nodes WHERE name = 'n-1'"))
    await asyncio.wait_for(blocked(pg_url, parent), 30)
    await inserting.commit()
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservation_members_node"):
        await delete
    await deleting.rollback()
    assert await child.fetchval("SELECT count(*) FROM nodes WHERE name = 'n-1'") == 1
    assert await child.fetchval("SELECT count(*) FROM reservation_members") == 1
