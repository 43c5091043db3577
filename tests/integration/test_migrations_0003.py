"""Migration 0003 gives nodes a fencing epoch and an address and adds the node backend's tables;
it upgrades a database holding nodes and attempts, and downgrades with rows in the new tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url
from domain.node_protocol import Decision, Phase

pytestmark = pytest.mark.integration

T = datetime(2026, 1, 1, tzinfo=UTC)
NEW_TABLES = {"node_links", "join_tokens", "node_credentials", "launches", "member_launches"}


async def _columns(conn: asyncpg.Connection, table: str) -> set[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = $1", table
    )
    return {r["column_name"] for r in rows}


async def _tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {r["tablename"] for r in rows}


async def _fill_0002(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, "
        "memory_mb_per_node) VALUES ('p', 'main', 'node', 2, 8000, 16384)"
    )
    for name, connectivity in (("n-0", "connected"), ("n-1", "lost")):
        await conn.execute(
            "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb) "
            "VALUES ($1, 'p', 'schedulable', $2, 8000, 16384)",
            name,
            connectivity,
        )
    await conn.execute(
        "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at) "
        "VALUES ('j1', 'p1', 'alice', 'starting', $1::jsonb, $2, $2)",
        json.dumps({"experiment": "e"}),
        T,
    )
    await conn.execute(
        "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at) "
        "VALUES ('a1', 'j1', 1, 'launching', $1, $1)",
        T,
    )
    await conn.execute(
        "INSERT INTO members (id, attempt_id, index, state, updated_at, node) "
        "VALUES ('m1', 'a1', 0, 'pending', $1, 'n-0')",
        T,
    )


async def test_upgrade_keeps_nodes_and_attempts_and_downgrade_removes_the_new_tables(
    empty_db: str,
) -> None:
    await migrate.upgrade_async(empty_db, "0002")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await _fill_0002(conn)

        await migrate.upgrade_async(empty_db, "0003")
        nodes = await conn.fetch("SELECT name, connectivity, epoch, address FROM nodes ORDER BY 1")
        assert [tuple(n) for n in nodes] == [("n-0", "connected", 1, ""), ("n-1", "lost", 1, "")]
        assert await _tables(conn) >= NEW_TABLES
        # the new tables take rows that refer to the old ones
        await conn.execute(
            "INSERT INTO node_links (node, session, gateway, connected_at, heartbeat_at, gpus, "
            "cpus, memory_mb, address) VALUES ('n-0', 1, 'gw', $1, $1, 2, 8.0, 16384, 'h0')",
            T,
        )
        await conn.execute(
            "INSERT INTO join_tokens (token_hash, pool, created_by, created_at, expires_at) "
            "VALUES ('h', 'p', 'alice', $1, $1)",
            T,
        )
        await conn.execute(
            "INSERT INTO node_credentials (id, node, credential_hash, created_at) "
            "VALUES ('c1', 'n-0', 'ch', $1)",
            T,
        )
        await conn.execute(
            "INSERT INTO launches (attempt_id, job_id, began_at, master_node, master_port) "
            "VALUES ('a1', 'j1', $1, 'n-0', 29500)",
            T,
        )
        await conn.execute(
            "INSERT INTO member_launches (member_id, attempt_id, idx, node, epoch, phase) "
            "VALUES ('m1', 'a1', 0, 'n-0', 1, 'prepared')"
        )
        refused = [
            "UPDATE member_launches SET phase = 'flying'",
            "UPDATE launches SET decision = 'maybe', decided_at = now()",
            "UPDATE launches SET decision = 'commit'",  # a decision has its time
            "UPDATE join_tokens SET used_at = now()",  # and a use its node
            "UPDATE nodes SET epoch = 0",
            "INSERT INTO launches (attempt_id, job_id, began_at, master_node, master_port) "
            "VALUES ('a-missing', 'j1', now(), 'n-0', 29500)",
        ]
        for sql in refused:
            with pytest.raises(asyncpg.IntegrityConstraintViolationError):
                await conn.execute(sql)
        partial = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_member_launches_node'"
        )
        assert "WHERE (released_at IS NULL)" in partial

        await migrate.downgrade_async(empty_db, "0002")
        assert not NEW_TABLES & await _tables(conn)
        assert {"epoch", "address"}.isdisjoint(await _columns(conn, "nodes"))
        assert await conn.fetchval("SELECT count(*) FROM nodes") == 2
        assert await conn.fetchval("SELECT state FROM attempts WHERE id = 'a1'") == "launching"
        assert await conn.fetchval("SELECT node FROM members WHERE id = 'm1'") == "n-0"

        await migrate.upgrade_async(empty_db, "0003")  # and up again
        assert await conn.fetchval("SELECT count(*) FROM launches") == 0
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("constraint", "values"),
    [("ck_member_launches_phase", Phase), ("ck_launches_decision", Decision)],
)
async def test_check_constraints_list_exactly_the_enum(
    pg_engine: AsyncEngine, constraint: str, values: Any
) -> None:
    async with pg_engine.connect() as conn:
        definition = (
            await conn.execute(
                text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
                {"n": constraint},
            )
        ).scalar_one()
    allowed = set(
        definition.split("ARRAY[", 1)[1].split("]", 1)[0].replace("::text", "").split(", ")
    )
    assert allowed == {f"'{v.value}'" for v in values}
