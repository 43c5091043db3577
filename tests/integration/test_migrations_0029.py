"""Migration 0029 on a database with nodes (docs/persistence.md, node state times): existing
nodes start with their ``updated_at`` as both change times and one history row of their
connectivity; then the triggers time every change in the statement that makes it, whatever
SQL makes it; downgrading drops them and upgrading again works."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration

BEFORE = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 2, tzinfo=UTC)


async def test_existing_nodes_are_backfilled_then_every_change_is_timed(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0027")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await conn.execute(
            "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, "
            "memory_mb_per_node) VALUES ('p', 'main', 'node', 0, 4000, 8192)"
        )
        await conn.execute(
            "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, updated_at) "
            "VALUES ('n-0', 'p', 'cordoned', 'lost', 4000, 8192, $1)",
            BEFORE,
        )
        await migrate.upgrade_async(empty_db, "0029")
        row = await conn.fetchrow("SELECT sched_changed_at, connectivity_changed_at FROM nodes")
        assert row is not None and tuple(row) == (BEFORE, BEFORE)
        history = await conn.fetch("SELECT at, connectivity FROM node_connectivity")
        assert [tuple(r) for r in history] == [(BEFORE, "lost")]

        # a statement of its own (as the node links' SQL): the times follow its updated_at
        await conn.execute("UPDATE nodes SET connectivity = 'connected', updated_at = $1", LATER)
        row = await conn.fetchrow("SELECT sched_changed_at, connectivity_changed_at FROM nodes")
        assert row is not None and tuple(row) == (BEFORE, LATER)  # sched did not change
        await conn.execute("UPDATE nodes SET address = '10.0.0.9', updated_at = now()")
        history = await conn.fetch("SELECT connectivity FROM node_connectivity ORDER BY seq")
        assert [r["connectivity"] for r in history] == ["lost", "connected"]  # no new row

        await migrate.downgrade_async(empty_db, "0027")
        assert await conn.fetchval("SELECT to_regclass('node_connectivity')") is None
        await migrate.upgrade_async(empty_db, "head")
        row = await conn.fetchrow("SELECT sched_changed_at, connectivity_changed_at FROM nodes")
        assert row is not None and row["connectivity_changed_at"] is not None
    finally:
        await conn.close()
