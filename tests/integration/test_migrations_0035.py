"""Migration 0035 (docs/persistence.md, "Reservations live in constraints too"): each reserved
GPU number is a row of ``gpu_claims`` under its primary key, kept by statement triggers on
``reservation_members`` instead of the GiST exclusion constraint. Upgrading claims the numbers
of the members already there; the claims follow every insert, delete (a release, the cascade
from ``reservations``), update (the cascade of a node's GPU count, a member's GPUs changed) and
TRUNCATE; a GPU held twice, by two statements or by two rows of one statement, is refused; no
statement that a trigger did not issue may write the claims; downgrading restores the exclusion
constraint, and upgrading again claims the numbers anew."""

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


async def add(conn: asyncpg.Connection, *members: tuple[str, int, str, int, int]) -> None:
    await conn.execute(MEMBERS, *([list(c) for c in zip(*members, strict=True)]))


async def claims(conn: asyncpg.Connection) -> list[int]:
    """The claimed numbers, checked to be exactly those the members hold."""
    claimed = [r["gpu"] for r in await conn.fetch("SELECT gpu FROM gpu_claims ORDER BY gpu")]
    assert claimed == [r["i"] for r in await conn.fetch(HELD)]
    return claimed


async def test_claims_follow_the_members_and_refuse_a_gpu_twice(empty_db: str) -> None:
    conn = await migrated(empty_db, "0034")
    try:
        await make_nodes(conn)
        await make_attempts(conn, ("att-1", "att-2", "att-3"))
        await add(conn, ("att-1", 0, "n-0", 0, 4), ("att-1", 1, "n-1", 2, 3))
        slots = dict(await conn.fetch("SELECT name, slot FROM nodes"))
        n0, n1 = slots["n-0"] * 64, slots["n-1"] * 64
        await migrate.upgrade_async(empty_db, "0035")
        # the members already there are claimed
        assert await claims(conn) == [n0, n0 + 1, n0 + 2, n0 + 3, n1 + 2]
        exclusion = (
            "SELECT count(*) FROM pg_constraint WHERE conname = 'ex_reservation_members_gpus'"
        )
        assert await conn.fetchval(exclusion) == 0

        # a GPU held already, or by two rows of one statement, is refused; nothing is kept
        with pytest.raises(asyncpg.UniqueViolationError, match="pk_gpu_claims"):
            await add(conn, ("att-2", 0, "n-0", 3, 5))
        with pytest.raises(asyncpg.UniqueViolationError):
            await add(conn, ("att-2", 0, "n-0", 4, 6), ("att-3", 0, "n-0", 5, 7))
        await add(conn, ("att-2", 0, "n-0", 4, 6), ("att-3", 0, "n-0", 6, 8))
        assert len(await claims(conn)) == 9

        # an update gives up what a member lost and claims what it gained; taking another
        # member's GPU is refused, and so is an update making two rows meet
        await conn.execute(
            "UPDATE reservation_members SET gpus = int4multirange(int4range($1, $2)) "
            "WHERE attempt_id = 'att-1' AND member = 1",
            n1 + 3,
            n1 + 5,
        )
        assert (await claims(conn))[-2:] == [n1 + 3, n1 + 4]
        assert len(await claims(conn)) == 10
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "UPDATE reservation_members SET gpus = int4multirange(int4range($1, $2)) "
                "WHERE attempt_id = 'att-2'",
                n0 + 3,
                n0 + 5,
            )
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "UPDATE reservation_members SET gpus = int4multirange(int4range($1, $2)) "
                "WHERE attempt_id IN ('att-2', 'att-3')",
                n0 + 6,
                n0 + 8,
            )
        # a node's GPU count cascades onto its members: their claims stay
        await conn.execute("UPDATE nodes SET gpus = 7 WHERE name = 'n-1'")
        assert len(await claims(conn)) == 10

        # a release (the cascade from reservations) gives the GPUs up; another takes them
        await conn.execute("DELETE FROM reservations WHERE attempt_id = 'att-2'")
        assert n0 + 4 not in await claims(conn)
        await reserve(conn, "att-2")
        await add(conn, ("att-3", 1, "n-0", 4, 6))
        assert len(await claims(conn)) == 10

        # nobody but the triggers writes the claims
        for statement in (
            "DELETE FROM gpu_claims",
            f"INSERT INTO gpu_claims (gpu) VALUES ({n0 + 100})",
            "UPDATE gpu_claims SET gpu = gpu + 1000",
            "TRUNCATE gpu_claims",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        assert len(await claims(conn)) == 10
        await conn.execute("TRUNCATE reservation_members")
        assert await claims(conn) == []

        # downgrade: the exclusion constraint refuses overlaps again; upgrade claims anew
        await add(conn, ("att-1", 0, "n-0", 0, 4), ("att-3", 0, "n-0", 4, 8))
        await migrate.downgrade_async(empty_db, "0034")
        assert await conn.fetchval(exclusion) == 1
        with pytest.raises(asyncpg.ExclusionViolationError):
            await add(conn, ("att-2", 0, "n-0", 3, 5))
        await add(conn, ("att-2", 0, "n-1", 0, 2))
        await migrate.upgrade_async(empty_db, "0035")
        assert len(await claims(conn)) == 10
        with pytest.raises(asyncpg.UniqueViolationError):
            await add(conn, ("att-2", 1, "n-1", 1, 2))
    finally:
        await conn.close()
