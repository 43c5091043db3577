"""The foreign keys kept by statement triggers (migration 0036; docs/persistence.md, "Foreign
keys checked per statement") under two real concurrent transactions, raw SQL: a parent deleted
while a child is inserted in another transaction never leaves an orphan. Whichever comes first
waits for the other: a child inserted first makes the delete cascade onto it (``ON DELETE
CASCADE``) or refuses the delete (``nodes``, ``NO ACTION``); a delete first refuses the child,
unless it rolls back. The same with a parent whose version the child's transaction wrote itself
(as the scheduler's store writes every parent it checks), both orders, and one written in a
subtransaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from adapters.postgres.connect import plain_url
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


TOUCH_JOB = "UPDATE jobs SET reason = 'moved' WHERE id = 'job-att-1'"


@pytest.mark.parametrize("child_commits", [True, False])
async def test_a_parent_the_transaction_wrote_is_not_locked_and_the_delete_still_waits(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, child_commits: bool
) -> None:
    child, parent = conns
    inserting = child.transaction()
    await inserting.start()
    await child.execute(TOUCH_JOB)  # the job's new version is this transaction's
    await child.execute(ATTEMPT, AT)
    deleting = parent.transaction()
    await deleting.start()
    delete = asyncio.create_task(parent.execute("DELETE FROM jobs WHERE id = 'job-att-1'"))
    await asyncio.wait_for(blocked(pg_url, parent), 30)  # on the update's own lock
    await (inserting.commit() if child_commits else inserting.rollback())
    await delete
    await deleting.commit()
    assert await child.fetchval("SELECT count(*) FROM attempts WHERE job_id = 'job-att-1'") == 0
    assert await child.fetchval("SELECT count(*) FROM attempts") == 1  # att-2's


@pytest.mark.parametrize("delete_commits", [True, False])
async def test_a_parent_deleted_first_is_not_the_transactions_own_and_refuses_the_child(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str, delete_commits: bool
) -> None:
    child, parent = conns
    deleting = parent.transaction()
    await deleting.start()
    await parent.execute("DELETE FROM jobs WHERE id = 'job-att-1'")  # not committed
    inserting = child.transaction()
    await inserting.start()
    touch = asyncio.create_task(child.execute(TOUCH_JOB))
    await asyncio.wait_for(blocked(pg_url, child), 30)
    await (deleting.commit() if delete_commits else deleting.rollback())
    await touch  # updates nothing when the delete committed
    if delete_commits:
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_attempts_job_id_jobs"):
            await child.execute(ATTEMPT, AT)
        await inserting.rollback()
        assert await child.fetchval("SELECT count(*) FROM attempts") == 1
    else:
        await child.execute(ATTEMPT, AT)
        await inserting.commit()
        assert await child.fetchval("SELECT count(*) FROM attempts") == 3


async def test_a_node_whose_counters_the_transaction_raised_cannot_go_under_its_member(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], pg_url: str
) -> None:
    child, parent = conns
    inserting = child.transaction()
    await inserting.start()
    # as the store does: the counters first (the node's new version), then the member
    await child.execute("UPDATE nodes SET used_mcpu = used_mcpu + 1 WHERE name = 'n-1'")
    await child.execute(RES_MEMBER)
    deleting = parent.transaction()
    await deleting.start()
    delete = asyncio.create_task(parent.execute("DELETE FROM nodes WHERE name = 'n-1'"))
    await asyncio.wait_for(blocked(pg_url, parent), 30)
    await inserting.commit()
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservation_members_node"):
        await delete
    await deleting.rollback()
    assert await child.fetchval("SELECT count(*) FROM reservation_members") == 1


async def test_parents_of_one_statement_mixed_own_locked_and_missing(
    conns: tuple[asyncpg.Connection, asyncpg.Connection],
) -> None:
    child, _ = conns
    two = (
        "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at) "
        "SELECT x.id, x.job, 2, 'launching', $3, $3 FROM unnest($1::text[], $2::text[]) "
        "AS x(id, job)"
    )
    async with child.transaction():
        await child.execute(TOUCH_JOB)
        # one parent this transaction wrote, one it did not (locked), one that does not exist
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_attempts_job_id_jobs") as e:
            async with child.transaction():  # a savepoint: the transaction goes on
                await child.execute(
                    two, ["a-1", "a-2", "a-3"], ["job-att-1", "job-att-2", "job-nobody"], AT
                )
        assert "job-nobody" in str(e.value.detail)
        await child.execute(two, ["a-1", "a-2"], ["job-att-1", "job-att-2"], AT)
    assert await child.fetchval("SELECT count(*) FROM attempts") == 4


@pytest.mark.parametrize("keep_savepoint", [True, False])
async def test_a_parent_written_in_a_subtransaction_is_checked_as_anothers(
    conns: tuple[asyncpg.Connection, asyncpg.Connection], keep_savepoint: bool
) -> None:
    """Its version carries the subtransaction's id, not the transaction's: it is looked up and
    locked as before, and gone when the savepoint rolled back."""
    child, _ = conns
    new_job = (
        "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at) "
        "VALUES ('job-sp', 'job-sp', 'u', 'pending', '{}', $1, $1)"
    )
    attempt = ATTEMPT.replace("'att-new', 'job-att-1'", "'att-sp', 'job-sp'")
    async with child.transaction():
        savepoint = child.transaction()
        await savepoint.start()
        await child.execute(new_job, AT)
        await (savepoint.commit() if keep_savepoint else savepoint.rollback())
        if keep_savepoint:
            await child.execute(attempt, AT)
        else:
            with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_attempts_job_id"):
                await child.execute(attempt, AT)
    count = "SELECT count(*) FROM attempts WHERE id = 'att-sp'"
    assert await child.fetchval(count) == (1 if keep_savepoint else 0)
