"""Migration 0040 (docs/persistence.md, "Foreign keys checked per statement" and "Which
transaction last wrote a job"): ``jobs_changed`` is called only for a row that does not already
hold the writing transaction's id, whoever writes; the outbox's key to its subscription is kept
by statement triggers (an orphan refused, a subscription's delete cascading, a key update and a
TRUNCATE refused); downgrading restores the foreign key and the unconditional trigger."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import AT, migrated

pytestmark = pytest.mark.integration

KEY = "fk_webhook_outbox_subscription_id_webhook_subscriptions"
XACT = "(pg_current_xact_id())::text::bigint"
JOBS = (
    "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
    "SELECT 'job-' || i, 'pv-' || i, 'u', 'pending', '{}', $1, $1, 'q' "
    "FROM generate_series(1, 3) AS i"
)
SUBSCRIPTION = (
    "INSERT INTO webhook_subscriptions (id, owner, scope, target, url, format, created_at, "
    "secret) VALUES ($1, 'u', 'user', 'u', 'https://example.invalid/', 'tuneplane', $2, 's')"
)
CALLS = (
    "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
    "WHERE funcname = 'jobs_changed'"
)
OUTBOX = (
    "INSERT INTO webhook_outbox (subscription_id, job_id, seq, state, owner, queue, at, "
    "next_at, created_at) "
    "SELECT s, 'job-1', 1, 'pending', 'u', 'q', $2, $2, $2 FROM unnest($1::text[]) AS s"
)


async def calls_of(conn: asyncpg.Connection, update: str) -> tuple[int, bool]:
    """Runs ``update`` in a transaction that is rolled back: how many times ``jobs_changed``
    was called (PL/pgSQL function statistics) and whether every job then held that
    transaction's id."""
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("SET LOCAL track_functions = 'pl'")
        before = await conn.fetchval(CALLS)  # counts not yet flushed may be left from before
        await conn.execute(update)
        calls = await conn.fetchval(CALLS) - before
        held = await conn.fetchval(f"SELECT bool_and(changed = {XACT}) FROM jobs")
    finally:
        await tx.rollback()
    return int(calls), bool(held)


async def test_jobs_changed_is_called_only_where_the_row_lacks_the_transaction(
    empty_db: str,
) -> None:
    conn = await migrated(empty_db, "0039")
    try:
        await conn.execute(JOBS, AT)
        plain = "UPDATE jobs SET reason = 'r'"
        mark = f"changed = {XACT}"  # the store's own
        own = f"UPDATE jobs SET reason = 'r', {mark}"
        forged = "UPDATE jobs SET reason = 'r', changed = 1"
        assert await calls_of(conn, plain) == (3, True)
        assert await calls_of(conn, own) == (3, True)  # before 0040: called anyway
        await migrate.upgrade_async(empty_db, "0040")
        assert await calls_of(conn, plain) == (3, True)
        assert await calls_of(conn, own) == (0, True)  # skipped, and the value is right
        assert await calls_of(conn, forged) == (3, True)  # a wrong value is replaced
        twice = f"UPDATE jobs SET reason = 'r'; UPDATE jobs SET state = 'starting', {mark}"
        assert await calls_of(conn, twice) == (3, True)  # the second finds its own id
        await migrate.downgrade_async(empty_db, "0039")
        assert await calls_of(conn, own) == (3, True)
    finally:
        await conn.close()


async def count(conn: asyncpg.Connection, sql: str) -> int:
    return int(await conn.fetchval(sql))


async def orphan_refused(conn: asyncpg.Connection) -> None:
    """An outbox row of a missing subscription is refused, alone or beside a good one."""
    for subs in (["wh-none"], ["wh-1", "wh-none"]):
        with pytest.raises(asyncpg.ForeignKeyViolationError) as refused:
            await conn.execute(OUTBOX, subs, AT)
        assert refused.value.constraint_name == KEY


async def test_the_outbox_key_is_kept_per_statement_and_downgrades(empty_db: str) -> None:
    conn = await migrated(empty_db, "0039")
    try:
        for sub in ("wh-1", "wh-2", "wh-3"):
            await conn.execute(SUBSCRIPTION, sub, AT)
        await conn.execute(OUTBOX, ["wh-1", "wh-2"], AT)  # rows from before: left alone
        await migrate.upgrade_async(empty_db, "0040")
        constraint = f"SELECT count(*) FROM pg_constraint WHERE conname = '{KEY}'"
        triggers = f"SELECT count(*) FROM pg_trigger WHERE tgname LIKE '{KEY}_%'"
        assert (await count(conn, constraint), await count(conn, triggers)) == (0, 5)

        await orphan_refused(conn)
        await conn.execute(OUTBOX, ["wh-1", "wh-2", "wh-2"], AT)  # several rows, one parent
        outbox = "SELECT count(*) FROM webhook_outbox"
        assert await count(conn, outbox) == 5
        # an outbox row moved to a missing subscription is refused, to a present one allowed
        with pytest.raises(asyncpg.ForeignKeyViolationError, match=KEY):
            await conn.execute("UPDATE webhook_outbox SET subscription_id = 'wh-none'")
        await conn.execute("UPDATE webhook_outbox SET subscription_id = 'wh-3' WHERE seq = 1 "
                           "AND id = (SELECT min(id) FROM webhook_outbox)")  # fmt: skip
        await conn.execute("UPDATE webhook_outbox SET status = 'dead'")  # no key changed
        # a subscription's key update with rows is refused; one without rows may move
        with pytest.raises(asyncpg.ForeignKeyViolationError, match=KEY):
            await conn.execute("UPDATE webhook_subscriptions SET id = 'wh-9' WHERE id = 'wh-2'")
        with pytest.raises(asyncpg.FeatureNotSupportedError):
            await conn.execute("TRUNCATE webhook_subscriptions CASCADE")
        # a subscription's delete takes its rows, and only its rows
        await conn.execute("DELETE FROM webhook_subscriptions WHERE id = 'wh-2'")
        by_sub = "SELECT count(*) FROM webhook_outbox WHERE subscription_id = "
        assert await count(conn, by_sub + "'wh-2'") == 0
        assert await count(conn, outbox) == 2  # wh-1's and the one moved to wh-3

        await migrate.downgrade_async(empty_db, "0039")
        assert (await count(conn, constraint), await count(conn, triggers)) == (1, 0)
        await orphan_refused(conn)
        await migrate.upgrade_async(empty_db, "head")
        await orphan_refused(conn)
        await conn.execute("DELETE FROM webhook_subscriptions")
        assert await count(conn, outbox) == 0
    finally:
        await conn.close()
