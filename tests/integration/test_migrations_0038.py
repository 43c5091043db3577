"""Migration 0038 (docs/persistence.md, "Foreign keys checked per statement"): the six
statement-level checks leave unlocked the parents this transaction wrote itself, and still
refuse every orphan, in a transaction that wrote some parents and not others; downgrading
gives back 0036's checks, which refuse the same, and upgrading again. The races are in
test_statement_foreign_keys.py."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.integration.test_migrations_0036 import KEYS, orphans_refused
from tests.support.reservation_rows import make_attempts, make_nodes, migrated

pytestmark = pytest.mark.integration

OWN = (
    "SELECT count(*) FROM pg_proc WHERE proname = ANY ($1::text[]) "
    "AND prosrc LIKE '%pg_current_xact_id%'"
)


async def refused_in_one_transaction(conn: asyncpg.Connection) -> None:
    """Every orphan refused inside one transaction (each statement in a savepoint), before and
    after it wrote parents itself (att-1's job and the nodes), beside a good row."""

    async def in_savepoint(sql: str, *args: object) -> str:
        async with conn.transaction():
            return str(await conn.execute(sql, *args))

    async with conn.transaction():
        await orphans_refused(conn, "att-1", in_savepoint)
        await conn.execute("UPDATE jobs SET reason = 'x' WHERE id = 'job-att-1'")
        await conn.execute("UPDATE nodes SET used_mcpu = used_mcpu + 1")
        await orphans_refused(conn, "att-1", in_savepoint)


async def test_own_parents_unlocked_orphans_refused_and_downgrade(empty_db: str) -> None:
    conn = await migrated(empty_db, "0037")
    try:
        await make_nodes(conn)
        await make_attempts(conn, ("att-1",))
        names = [k + "_inserted" for k in KEYS]
        assert await conn.fetchval(OWN, names) == 0
        await migrate.upgrade_async(empty_db, "0038")
        assert await conn.fetchval(OWN, names) == len(KEYS)
        await refused_in_one_transaction(conn)
        await migrate.downgrade_async(empty_db, "0037")
        assert await conn.fetchval(OWN, names) == 0
        await refused_in_one_transaction(conn)
        await migrate.upgrade_async(empty_db, "head")
        assert await conn.fetchval(OWN, names) == len(KEYS)
        await orphans_refused(conn, "att-1")
    finally:
        await conn.close()
