"""Migration 0017 keys ``attempt_logs`` by (attempt, member): a log stored before is member 0's
(the only member whose log was kept), and going back keeps member 0's only."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration


async def test_earlier_logs_become_member_0s_and_members_get_their_own(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0015")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await conn.execute("SET session_replication_role = replica")  # no attempt rows needed
        await conn.execute(
            "INSERT INTO attempt_logs (attempt_id, data, truncated) VALUES ('att-1', 'old', false)"
        )
        await migrate.upgrade_async(empty_db, "0017")
        insert = (
            "INSERT INTO attempt_logs (attempt_id, member, data, truncated)"
            " VALUES ($1, $2, $3, false)"
        )
        await conn.execute(insert, "att-1", 1, b"rank 1")
        rows = await conn.fetch("SELECT member, data FROM attempt_logs ORDER BY member")
        assert [(r["member"], bytes(r["data"])) for r in rows] == [(0, b"old"), (1, b"rank 1")]
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(insert, "att-1", 1, b"again")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(insert, "att-1", -1, b"negative")
        await migrate.downgrade_async(empty_db, "0015")
        rows = await conn.fetch("SELECT attempt_id, data FROM attempt_logs")
        assert [(r["attempt_id"], bytes(r["data"])) for r in rows] == [("att-1", b"old")]
    finally:
        await conn.close()
