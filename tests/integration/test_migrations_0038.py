"""Migration 0038 (docs/persistence.md, "Reservations live in constraints too"): ``nodes`` and
``gpu_claims`` are kept half full, so that a reservation's update of a node's counters and of its
window's mask is a HOT update (no new index entry); downgrading gives back the default, and the
counters and masks hold what they did either way."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import make_attempts, make_nodes, migrated

pytestmark = pytest.mark.integration

OPTIONS = (
    "SELECT relname, reloptions FROM pg_class WHERE relname IN ('nodes', 'gpu_claims') "
    "ORDER BY relname"
)
# this transaction's updates of a table, and how many of them were HOT
UPDATES = "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = $1"
MEMBER = (
    "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
    "node_slot, node_gpus, gpus) SELECT $1, 0, 'main', n.name, 1000, 1024, n.slot, n.gpus, "
    "int4multirange(int4range(n.slot * 64 + $2, n.slot * 64 + $3)) FROM nodes n "
    "WHERE n.name = 'n-0'"
)
COUNTERS = "UPDATE nodes SET used_mcpu = used_mcpu + $1, used_memory_mb = used_memory_mb + $2"


async def reserve_and_release(conn: asyncpg.Connection) -> tuple[tuple[int, int], ...]:
    """In one transaction, rolled back: raise every node's counters, claim GPUs 0-3 of n-0 and
    give them back, then claim 2-5 (an update of the window's mask each time); the updates of
    ``nodes`` and ``gpu_claims`` and how many were HOT, and what the mask held."""
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute(COUNTERS, 1000, 1024)
        await conn.execute(MEMBER, "att-1", 0, 4)
        await conn.execute("DELETE FROM reservation_members WHERE attempt_id = 'att-1'")
        await conn.execute(MEMBER, "att-1", 2, 6)
        nodes = tuple(await conn.fetchrow(UPDATES, "nodes"))
        claims = tuple(await conn.fetchrow(UPDATES, "gpu_claims"))
        bits = await conn.fetchval("SELECT bits FROM gpu_claims")
        used = await conn.fetchval("SELECT sum(used_mcpu) FROM nodes")
    finally:
        await tx.rollback()
    return nodes, claims, (bits, used)


async def test_node_counters_and_masks_are_updated_in_place(empty_db: str) -> None:
    conn = await migrated(empty_db, "0037")
    try:
        assert [r["reloptions"] for r in await conn.fetch(OPTIONS)] == [None, None]
        await migrate.upgrade_async(empty_db, "0038")
        assert [tuple(r) for r in await conn.fetch(OPTIONS)] == [
            ("gpu_claims", ["fillfactor=50"]),
            ("nodes", ["fillfactor=50"]),
        ]
        # rows written since: every update of the counters and of the mask is HOT
        await make_nodes(conn)
        await make_attempts(conn, ("att-1",))
        nodes, claims, held = await reserve_and_release(conn)
        assert nodes == (2, 2)
        assert claims == (2, 2)  # the mask's row was inserted by the first claim
        assert held == (0b111100, 2000)

        # downgrade: the default again, the same rows and the same guarantees
        await migrate.downgrade_async(empty_db, "0037")
        assert [r["reloptions"] for r in await conn.fetch(OPTIONS)] == [None, None]
        *_, held = await reserve_and_release(conn)
        assert held == (0b111100, 2000)
        await migrate.upgrade_async(empty_db, "head")
    finally:
        await conn.close()
