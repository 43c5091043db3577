"""Migration 0025 on a database with tokens (issue 24): a token made before keeps working (no
label, no expiry, never used); one flagged revoked stays revoked; going back revokes a token
with an expiry rather than make it eternal (0024 cannot expire one)."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration
INSERT = (
    "INSERT INTO api_tokens (id, name, token_hash, created_at, revoked) "
    "VALUES ($1, 'admin', $2, now(), $3)"
)


async def test_existing_tokens_are_kept_and_revocations_too(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0024")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await conn.execute("INSERT INTO users (name, role) VALUES ('admin', 'admin')")
        await conn.execute(INSERT, "tok-live", "a" * 64, False)
        await conn.execute(INSERT, "tok-dead", "b" * 64, True)
        await migrate.upgrade_async(empty_db, "0025")
        rows = {
            r["id"]: r
            for r in await conn.fetch(
                "SELECT id, label, expires_at, last_used_at, revoked_at, revoked_by FROM api_tokens"
            )
        }
        live, dead = rows["tok-live"], rows["tok-dead"]
        assert (live["label"], live["expires_at"], live["last_used_at"]) == ("", None, None)
        assert live["revoked_at"] is None
        assert dead["revoked_at"] is not None and dead["revoked_by"] is None
        await conn.execute(
            "INSERT INTO api_tokens (id, name, token_hash, created_at, expires_at) "
            "VALUES ('tok-exp', 'admin', $1, now(), now() + interval '30 days')",
            "c" * 64,
        )
        await migrate.downgrade_async(empty_db, "0024")
        back = dict(await conn.fetch("SELECT id, revoked FROM api_tokens"))
        assert back == {"tok-live": False, "tok-dead": True, "tok-exp": True}
    finally:
        await conn.close()
