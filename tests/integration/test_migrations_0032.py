"""Migration 0032 on a database with live reservations (docs/persistence.md, reservations):
``reserved_gpus`` rows become each member's set of GPU numbers and ``node_gpus`` the nodes' GPU
counts; downgrading turns them back into the same rows; upgrading again works."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import make_attempts, make_nodes, migrated

pytestmark = pytest.mark.integration

# (node, gpu_index, attempt, member): a gang of two members on two nodes, one with a gap
RESERVED = [
    ("n-0", 0, "att-1", 0), ("n-0", 1, "att-1", 0), ("n-1", 2, "att-1", 1),
    ("n-1", 3, "att-1", 1), ("n-1", 5, "att-1", 1), ("n-0", 7, "att-2", 0),
]  # fmt: skip
MEMBERS = [("att-1", 0, "n-0"), ("att-1", 1, "n-1"), ("att-2", 0, "n-0"), ("att-2", 1, "n-1")]


async def _seed_0031(conn: asyncpg.Connection) -> None:
    await make_nodes(conn, gpu_rows=True)
    await make_attempts(conn, ("att-1", "att-2"))
    await conn.executemany(
        "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb) "
        "VALUES ($1, $2, 'main', $3, 100, 100)",
        MEMBERS,
    )
    await conn.executemany(
        "INSERT INTO reserved_gpus (node, gpu_index, attempt_id, member) VALUES ($1, $2, $3, $4)",
        RESERVED,
    )


async def test_reserved_gpus_convert_to_sets_and_back(empty_db: str) -> None:
    conn = await migrated(empty_db, "0031")
    try:
        await _seed_0031(conn)
        await migrate.upgrade_async(empty_db, "0032")
        nodes = await conn.fetch("SELECT name, slot, gpus FROM nodes ORDER BY name")
        assert [r["gpus"] for r in nodes] == [8, 8]
        assert len({r["slot"] for r in nodes}) == 2
        rows = await conn.fetch(
            "SELECT attempt_id, member, node, node_slot, node_gpus, "
            "ARRAY(SELECT i - node_slot * 64 FROM unnest(gpus) x, "
            "      generate_series(lower(x), upper(x) - 1) i ORDER BY i) AS local "
            "FROM reservation_members ORDER BY attempt_id, member"
        )
        slot = {r["name"]: r["slot"] for r in nodes}
        assert [(r["attempt_id"], r["member"], r["local"]) for r in rows] == [
            ("att-1", 0, [0, 1]),
            ("att-1", 1, [2, 3, 5]),
            ("att-2", 0, [7]),
            ("att-2", 1, []),  # a member without GPUs
        ]
        assert all(r["node_slot"] == slot[r["node"]] and r["node_gpus"] == 8 for r in rows)
        assert await conn.fetchval("SELECT to_regclass('reserved_gpus')") is None

        await migrate.downgrade_async(empty_db, "0031")
        back = await conn.fetch(
            "SELECT node, gpu_index, attempt_id, member FROM reserved_gpus "
            "ORDER BY attempt_id, member, gpu_index"
        )
        assert sorted(tuple(r) for r in back) == sorted(RESERVED)
        assert await conn.fetchval("SELECT count(*) FROM node_gpus") == 16

        await migrate.upgrade_async(empty_db, "head")
        assert await conn.fetchval("SELECT count(*) FROM reservation_members") == 4
    finally:
        await conn.close()


async def test_a_reserved_gpu_the_node_lost_stops_the_upgrade(empty_db: str) -> None:
    """Not reachable through 0031's constraints (forged here): the check refuses to convert a
    reservation of a GPU its node no longer has, and nothing of the upgrade stays."""
    conn = await migrated(empty_db, "0031")
    try:
        await _seed_0031(conn)
        # n-1 lost GPU 5 (the foreign key of reserved_gpus is disabled for this forgery)
        await conn.execute("SET session_replication_role = replica")
        await conn.execute("DELETE FROM node_gpus WHERE node = 'n-1' AND gpu_index >= 5")
        await conn.execute("SET session_replication_role = DEFAULT")
        with pytest.raises(Exception, match="ck_reservation_members_gpus_on_node"):
            await migrate.upgrade_async(empty_db, "0032")
        assert await migrate.current_async(empty_db) == "0031"
    finally:
        await conn.close()
