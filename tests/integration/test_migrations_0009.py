"""Migration 0009 makes table ``plugins``: its CHECKs list exactly the groups and places of
execution that domain.plugins declares (adding one needs a migration), and a version's
disabled_at, disabled_by and disabled_reason are set and cleared together."""

from __future__ import annotations

import json

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url
from domain.plugins import EXECUTES, GROUPS

pytestmark = pytest.mark.integration
INSERT = (
    'INSERT INTO plugins (name, version, "group", executes, capabilities, description, '
    "declaration, manifest, digest, blob, size, published_by, published_at, disabled_at, "
    "disabled_by, disabled_reason) VALUES ($1, $2, $3, $4, '[]', 'd', '{}', $5, 'sha256:x', "
    "'sha256:y', 1, 'alice', now(), $6, $7, $8)"
)


async def _listed(conn: asyncpg.Connection, name: str) -> set[str]:
    definition = await conn.fetchval(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1", name
    )
    inner = definition.split("ARRAY[", 1)[1].split("]", 1)[0].replace("::text", "")
    return {v.strip().strip("'") for v in inner.split(",")}


async def test_the_plugins_table_and_its_checks(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0009")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        assert await _listed(conn, "ck_plugins_group") == set(GROUPS)
        assert await _listed(conn, "ck_plugins_executes") == set(EXECUTES)
        files = json.dumps({"files": []})
        await conn.execute(INSERT, "a", "1.0.0", "evaluation", "workload", files, None, None, None)
        for bad in (
            ("b", "1.0.0", "training", "workload", files, None, None, None),
            ("b", "1.0.0", "evaluation", "cluster", files, None, None, None),
            ("b", "1.0.0", "evaluation", "workload", files, None, "admin", "why"),
        ):
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(INSERT, *bad)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(INSERT, "a", "1.0.0", "reward", "node", files, None, None, None)
        await migrate.downgrade_async(empty_db, "0008")
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE tablename = 'plugins'")
        assert tables == []
    finally:
        await conn.close()
