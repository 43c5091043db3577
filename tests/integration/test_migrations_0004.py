"""Migrations 0004 and 0005 give nodes a check result (and its time) and add ``pool_checks``;
they upgrade a database holding nodes, and downgrade with checks recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url
from domain.fleet import Validation

pytestmark = pytest.mark.integration

T = datetime(2026, 1, 1, tzinfo=UTC)
NEW_COLUMNS = {"validation", "validation_reason", "validated_at"}


async def _columns(conn: asyncpg.Connection, table: str) -> set[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = $1", table
    )
    return {r["column_name"] for r in rows}


async def _fill_0003(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, "
        "memory_mb_per_node) VALUES ('p', 'main', 'node', 0, 4000, 8192)"
    )
    for name, connectivity in (("n-0", "connected"), ("n-1", "lost")):
        await conn.execute(
            "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, address) "
            "VALUES ($1, 'p', 'schedulable', $2, 4000, 8192, '10.0.0.1')",
            name,
            connectivity,
        )


async def test_upgrade_leaves_nodes_unchecked_and_downgrade_removes_checks(
    empty_db: str,
) -> None:
    await migrate.upgrade_async(empty_db, "0003")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await _fill_0003(conn)

        await migrate.upgrade_async(empty_db, "0005")
        rows = await conn.fetch(
            "SELECT name, connectivity, validation, validation_reason, validated_at "
            "FROM nodes ORDER BY 1"
        )
        assert [tuple(r) for r in rows] == [
            ("n-0", "connected", "unchecked", "", None),
            ("n-1", "lost", "unchecked", "", None),
        ]
        await conn.execute(
            "UPDATE nodes SET validation = 'failed', validation_reason = 'storage', "
            "validated_at = $1 WHERE name = 'n-0'",
            T,
        )
        await conn.execute(
            "INSERT INTO pool_checks (id, pool, job_id, nodes, started_at) "
            "VALUES ('chk-1', 'p', 'job-1', $1::jsonb, $2)",
            json.dumps(["n-0", "n-1"]),
            T,
        )
        refused = [
            "UPDATE nodes SET validation = 'maybe'",
            "INSERT INTO pool_checks (id, pool, job_id, nodes, started_at) "
            "VALUES ('chk-2', 'missing', 'job-2', '[]', now())",  # its pool must exist
        ]
        for sql in refused:
            with pytest.raises(asyncpg.IntegrityConstraintViolationError):
                await conn.execute(sql)

        await migrate.downgrade_async(empty_db, "0004")  # the time goes, the result stays
        assert "validated_at" not in await _columns(conn, "nodes")
        assert await conn.fetchval("SELECT validation FROM nodes WHERE name = 'n-0'") == "failed"

        await migrate.downgrade_async(empty_db, "0003")
        assert NEW_COLUMNS.isdisjoint(await _columns(conn, "nodes"))
        assert await _columns(conn, "pool_checks") == set()
        assert await conn.fetchval("SELECT count(*) FROM nodes") == 2

        await migrate.upgrade_async(empty_db, "head")  # and up again
        assert await conn.fetchval("SELECT count(*) FROM pool_checks") == 0
        assert await conn.fetchval("SELECT validation FROM nodes WHERE name = 'n-0'") == "unchecked"
    finally:
        await conn.close()


async def test_the_validation_check_lists_exactly_the_enum(pg_engine: AsyncEngine) -> None:
    async with pg_engine.connect() as conn:
        definition = (
            await conn.execute(
                text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
                {"n": "ck_nodes_validation"},
            )
        ).scalar_one()
    allowed = set(
        definition.split("ARRAY[", 1)[1].split("]", 1)[0].replace("::text", "").split(", ")
    )
    assert allowed == {f"'{v.value}'" for v in Validation}
