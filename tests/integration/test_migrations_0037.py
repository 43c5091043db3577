"""Migration 0037 (docs/persistence.md, "Reservations live in constraints too"): the GPU claims
are one bit mask per node window (``gpu_claims (slot, bits)``) instead of one row per GPU number
(0035). Upgrading converts the claims of the members already there; the masks follow every
insert, delete (a release, the cascade from ``reservations``), update (the cascade of a node's
GPU count, a member's GPUs changed) and TRUNCATE; a GPU held twice, by two statements or by two
rows of one statement, is refused, and nothing of the statement is kept; a release frees exactly
its own bits; a whole window of 64 GPUs (bit 63 included) is claimed and freed; no statement
that a trigger did not issue may write the claims; downgrading gives back one row per number,
and upgrading again builds the masks anew. The race of two transactions is in
test_reservation_constraints.py."""

from __future__ import annotations

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import make_attempts, make_nodes, migrated, reserve

pytestmark = pytest.mark.integration

# members given as (attempt, member, node, first GPU, end GPU), several in one statement
MEMBERS = (
    "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
    "node_slot, node_gpus, gpus) "
    "SELECT x.a, x.m, 'main', n.name, 0, 0, n.slot, n.gpus, "
    "       int4multirange(int4range(n.slot * 64 + x.lo, n.slot * 64 + x.hi)) "
    "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::int[]) AS x(a, m, node, lo, hi) "
    "JOIN nodes n ON n.name = x.node"
)
HELD = (
    "SELECT i FROM reservation_members m CROSS JOIN LATERAL unnest(m.gpus) AS x "
    "CROSS JOIN LATERAL generate_series(lower(x), upper(x) - 1) AS i ORDER BY i"
)
# the numbers the masks claim
MASKED = (
    "SELECT c.slot * 64 + i AS i FROM gpu_claims c CROSS JOIN generate_series(0, 63) AS i "
    "WHERE c.bits & (CAST(1 AS bigint) << i) <> 0 ORDER BY 1"
)
SET = "UPDATE reservation_members SET gpus = int4multirange(int4range($1, $2)) WHERE "


async def add(conn: asyncpg.Connection, *members: tuple[str, int, str, int, int]) -> None:
    await conn.execute(MEMBERS, *([list(c) for c in zip(*members, strict=True)]))


async def claims(conn: asyncpg.Connection) -> list[int]:
    """The claimed numbers, checked to be exactly those the members hold."""
    claimed = [r["i"] for r in await conn.fetch(MASKED)]
    assert claimed == [r["i"] for r in await conn.fetch(HELD)]
    return claimed


async def test_masks_follow_the_members_and_refuse_a_gpu_twice(empty_db: str) -> None:
    conn = await migrated(empty_db, "0036")
    try:
        await make_nodes(conn)
        await make_attempts(conn, ("att-1", "att-2", "att-3"))
        await add(conn, ("att-1", 0, "n-0", 0, 4), ("att-1", 1, "n-1", 2, 3))
        slots = dict(await conn.fetch("SELECT name, slot FROM nodes"))
        n0, n1 = slots["n-0"] * 64, slots["n-1"] * 64
        await migrate.upgrade_async(empty_db, "0037")
        # the members already there are claimed: one row a window
        assert await claims(conn) == [n0, n0 + 1, n0 + 2, n0 + 3, n1 + 2]
        assert await conn.fetchval("SELECT count(*) FROM gpu_claims") == 2

        # a GPU held already, or by two rows of one statement, is refused; nothing is kept
        with pytest.raises(asyncpg.UniqueViolationError, match="pk_gpu_claims") as held:
            await add(conn, ("att-2", 0, "n-0", 3, 5))
        assert held.value.constraint_name == "pk_gpu_claims"
        with pytest.raises(asyncpg.UniqueViolationError, match="pk_gpu_claims"):
            await add(conn, ("att-2", 0, "n-0", 4, 6), ("att-3", 0, "n-0", 5, 7))
        # ... even when the other rows of the statement were fine (another node's)
        with pytest.raises(asyncpg.UniqueViolationError):
            await add(conn, ("att-2", 0, "n-1", 4, 6), ("att-3", 0, "n-0", 0, 1))
        assert len(await claims(conn)) == 5
        await add(conn, ("att-2", 0, "n-0", 4, 6), ("att-3", 0, "n-0", 6, 8))
        assert len(await claims(conn)) == 9

        # an update gives up what a member lost and claims what it gained; taking another
        # member's GPU is refused, and so is an update making two rows meet
        await conn.execute(SET + "attempt_id = 'att-1' AND member = 1", n1 + 3, n1 + 5)
        assert (await claims(conn))[-2:] == [n1 + 3, n1 + 4]
        assert len(await claims(conn)) == 10
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(SET + "attempt_id = 'att-2'", n0 + 3, n0 + 5)
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(SET + "attempt_id IN ('att-2', 'att-3')", n0 + 6, n0 + 8)
        # moving a member within its window, keeping one of its GPUs, is an update too
        await conn.execute(SET + "attempt_id = 'att-1' AND member = 1", n1 + 4, n1 + 7)
        assert (await claims(conn))[-3:] == [n1 + 4, n1 + 5, n1 + 6]
        # a node's GPU count cascades onto its members: their claims stay
        await conn.execute("UPDATE nodes SET gpus = 7 WHERE name = 'n-1'")
        assert len(await claims(conn)) == 11

        # a release (the cascade from reservations) frees its own bits, not its neighbours'
        await conn.execute("DELETE FROM reservations WHERE attempt_id = 'att-2'")
        kept = [*range(n0, n0 + 4), n0 + 6, n0 + 7, *range(n1 + 4, n1 + 7)]
        assert await claims(conn) == kept
        await reserve(conn, "att-2")
        await add(conn, ("att-2", 1, "n-0", 4, 6))
        assert len(await claims(conn)) == 11

        # nobody but the triggers writes the claims
        for statement in (
            "DELETE FROM gpu_claims",
            f"INSERT INTO gpu_claims (slot, bits) VALUES ({slots['n-0'] + 100}, 1)",
            "UPDATE gpu_claims SET bits = 0",
            "TRUNCATE gpu_claims",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        assert len(await claims(conn)) == 11
        await conn.execute("TRUNCATE reservation_members")
        assert await claims(conn) == []
        assert await conn.fetchval("SELECT count(*) FROM gpu_claims") == 0

        # downgrade: a row a number again; upgrade builds the masks anew
        await add(conn, ("att-1", 0, "n-0", 0, 4), ("att-3", 0, "n-0", 4, 8))
        await migrate.downgrade_async(empty_db, "0036")
        numbers = [r["gpu"] for r in await conn.fetch("SELECT gpu FROM gpu_claims ORDER BY gpu")]
        assert numbers == [r["i"] for r in await conn.fetch(HELD)] == list(range(n0, n0 + 8))
        with pytest.raises(asyncpg.UniqueViolationError, match="pk_gpu_claims"):
            await add(conn, ("att-2", 0, "n-0", 3, 5))
        await add(conn, ("att-2", 0, "n-1", 0, 2))
        await migrate.upgrade_async(empty_db, "head")
        assert len(await claims(conn)) == 10
        with pytest.raises(asyncpg.UniqueViolationError):
            await add(conn, ("att-2", 1, "n-1", 1, 2))
    finally:
        await conn.close()


async def test_a_whole_window_of_64_gpus_is_one_mask(empty_db: str) -> None:
    conn = await migrated(empty_db, "head")
    try:
        await conn.execute(
            "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, "
            "memory_mb_per_node) VALUES ('wide', 'main', 'node', 64, 4000, 8192)"
        )
        await conn.execute(
            "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, gpus) "
            "VALUES ('w-0', 'wide', 'schedulable', 'connected', 4000, 8192, 64)"
        )
        await make_attempts(conn, ("att-1", "att-2", "att-3"))
        w0 = await conn.fetchval("SELECT slot * 64 FROM nodes WHERE name = 'w-0'")
        await add(conn, ("att-1", 0, "w-0", 0, 64))  # every GPU, bit 63 included
        assert await conn.fetchval("SELECT bits FROM gpu_claims") == -1
        assert await claims(conn) == list(range(w0, w0 + 64))
        for lo, hi in ((63, 64), (0, 1), (10, 40)):
            with pytest.raises(asyncpg.UniqueViolationError):
                await add(conn, ("att-2", 0, "w-0", lo, hi))
        await conn.execute("DELETE FROM reservations WHERE attempt_id = 'att-1'")
        assert await conn.fetchval("SELECT bits FROM gpu_claims") == 0
        await add(conn, ("att-2", 0, "w-0", 63, 64), ("att-3", 0, "w-0", 0, 63))
        assert await conn.fetchval("SELECT bits FROM gpu_claims") == -1
        await conn.execute("DELETE FROM reservations WHERE attempt_id = 'att-2'")
        assert await claims(conn) == list(range(w0, w0 + 63))
        assert await conn.fetchval("SELECT bits FROM gpu_claims") == 2**63 - 1
    finally:
        await conn.close()
