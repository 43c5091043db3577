"""Migration 0002 moves the role from tokens to users, and gives jobs their queue."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration

T = datetime(2026, 1, 1, tzinfo=UTC)
TOKENS = [  # (id, name, role, minutes after T)
    ("t1", "alice", "viewer", 0),
    ("t2", "alice", "admin", 5),
    ("t3", "bob", "member", 1),
    ("t4", "bob", "operator", 2),
    ("t5", "carol", "viewer", 3),
]


async def test_tokens_become_users_with_their_most_privileged_role(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0001")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        for token_id, name, role, minutes in TOKENS:
            await conn.execute(
                "INSERT INTO api_tokens (id, name, role, token_hash, created_at) "
                "VALUES ($1, $2, $3, $4, $5::timestamptz + make_interval(mins => $6))",
                token_id, name, role, "h" + token_id, T, minutes,
            )  # fmt: skip
        spec = {"experiment": "e", "queue": "q1"}
        for job_id, s in (("j1", spec), ("j2", {"experiment": "e"})):
            await conn.execute(
                "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at) "
                "VALUES ($1, $1, 'alice', 'pending', $2::jsonb, $3, $3)",
                job_id, json.dumps(s), T,
            )  # fmt: skip

        await migrate.upgrade_async(empty_db, "0002")
        users = await conn.fetch("SELECT name, role, created_at, disabled FROM users ORDER BY 1")
        assert [(u["name"], u["role"], u["disabled"]) for u in users] == [
            ("alice", "admin", False),
            ("bob", "operator", False),
            ("carol", "viewer", False),
        ]
        assert users[1]["created_at"] == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
        members = await conn.fetch("SELECT user_name, team FROM team_members ORDER BY 1")
        assert [tuple(m) for m in members] == [(n, "default") for n in ("alice", "bob", "carol")]
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'api_tokens'"
        )
        assert "role" not in {c["column_name"] for c in columns}
        queues = await conn.fetch("SELECT id, queue FROM jobs ORDER BY id")
        assert [tuple(q) for q in queues] == [("j1", "q1"), ("j2", "default")]
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute(
                "INSERT INTO api_tokens (id, name, token_hash, created_at) "
                "VALUES ('t9', 'nobody', 'h9', now())"
            )

        await migrate.downgrade_async(empty_db, "0001")
        roles = await conn.fetch("SELECT id, role FROM api_tokens ORDER BY id")
        # each token gets its user's role back
        assert [tuple(r) for r in roles] == [
            ("t1", "admin"),
            ("t2", "admin"),
            ("t3", "operator"),
            ("t4", "operator"),
            ("t5", "viewer"),
        ]
    finally:
        await conn.close()


async def test_an_empty_database_gets_no_users_or_teams(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "head")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        assert await conn.fetchval("SELECT count(*) FROM users") == 0
        assert await conn.fetchval("SELECT count(*) FROM teams") == 0
    finally:
        await conn.close()
