"""Migration 0036 (docs/persistence.md, "Foreign keys checked per statement"): six foreign keys
on the store's path are kept by statement triggers instead of per-row checks. Raw SQL, whoever
writes: an orphan child is refused (one bad row refuses the whole statement), so is a child key
changed to a missing parent; a parent's delete cascades (or is refused for ``nodes``); a parent's
key update is refused (or cascades for ``nodes``); TRUNCATE of a parent with children is
refused; downgrading restores the foreign keys, upgrading again the triggers. The race of two
transactions is tested in test_statement_foreign_keys.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import AT, make_attempts, make_nodes, migrated

pytestmark = pytest.mark.integration

KEYS = (
    "fk_attempts_job_id_jobs",
    "fk_members_attempt_id_attempts",
    "fk_reservations_attempt_id_attempts",
    "fk_reservation_members_attempt_id_reservations",
    "fk_reservation_members_node_nodes",
    "fk_job_events_job_id_jobs",
)
CONSTRAINTS = "SELECT count(*) FROM pg_constraint WHERE conname = ANY($1::text[])"
TRIGGERS = "SELECT count(*) FROM pg_trigger WHERE tgname LIKE ANY($1::text[])"

# one row of each child table, given its parent key; each names a parent that may not exist
ATTEMPT = (
    "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at) "
    "SELECT x.id, x.job, 10 + x.i, 'launching', $3, $3 "
    "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(id, job, i)"
)
MEMBER = (
    "INSERT INTO members (id, attempt_id, index, state, updated_at) "
    "SELECT x.id, x.a, 10 + x.i, 'pending', $3 "
    "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(id, a, i)"
)
RESERVATION = (
    "INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) "
    "VALUES ($1, 'job-x', 'default', $2)"
)
RES_MEMBER = (
    "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
    "node_slot, node_gpus, gpus) "
    "SELECT x.a, x.m, 'main', x.node, 0, 0, coalesce(n.slot, 0), 8, "
    "int4multirange(int4range(coalesce(n.slot, 0) * 64 + x.m, coalesce(n.slot, 0) * 64 + x.m + 1)) "
    "FROM unnest($1::text[], $2::int[], $3::text[]) AS x(a, m, node) "
    "LEFT JOIN nodes n ON n.name = x.node"
)
EVENT = (
    "INSERT INTO job_events (job_id, seq, at, state) "
    "SELECT j, 100, $2, 'pending' FROM unnest($1::text[]) AS j"
)


async def count(conn: asyncpg.Connection, table: str) -> int:
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def orphans_refused(
    conn: asyncpg.Connection, good: str, execute: Callable[..., Awaitable[str]] | None = None
) -> None:
    """Each key refuses a child whose parent is absent, alone or beside a good row (of the
    attempt ``good``, its job and reservation present). ``execute``: how each statement runs
    (``conn.execute`` unless given)."""
    execute = execute or conn.execute
    job = "job-" + good
    cases = [
        (ATTEMPT, (["att-9", "att-8"], [job, "job-none"], AT), "fk_attempts_job_id_jobs"),
        (MEMBER, (["m-8", "m-9"], ["att-none", good], AT), "fk_members_attempt_id_attempts"),
        (RESERVATION, ("att-none", AT), "fk_reservations_attempt_id_attempts"),
        (
            RES_MEMBER,
            ([good, "att-none"], [5, 1], ["n-0", "n-0"]),
            "fk_reservation_members_attempt_id_reservations",
        ),
        (RES_MEMBER, ([good], [6], ["n-none"]), "fk_reservation_members_node_nodes"),
        (EVENT, ([job, "job-none"], AT), "fk_job_events_job_id_jobs"),
    ]
    for sql, args, name in cases:
        with pytest.raises(asyncpg.ForeignKeyViolationError) as refused:
            await execute(sql, *args)
        assert refused.value.constraint_name == name
    # a forged GPU count: the node exists, the (name, slot, gpus) key does not
    with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservation_members_node"):
        await execute(RES_MEMBER.replace("0), 8, ", "0), 64, "), [good], [7], ["n-0"])


async def test_statement_keys_refuse_orphans_cascade_and_downgrade(empty_db: str) -> None:
    conn = await migrated(empty_db, "0035")
    try:
        await make_nodes(conn)
        await make_attempts(conn, ("att-1", "att-2", "att-3"))
        await conn.execute(MEMBER, ["m-1", "m-2"], ["att-1", "att-2"], AT)
        await conn.execute(RES_MEMBER, ["att-1", "att-2"], [0, 0], ["n-0", "n-1"])
        await migrate.upgrade_async(empty_db, "0036")
        assert await conn.fetchval(CONSTRAINTS, list(KEYS)) == 0
        assert await conn.fetchval(TRIGGERS, [k + "_%" for k in KEYS]) == 5 * len(KEYS)

        await orphans_refused(conn, "att-1")
        assert await count(conn, "attempts") == 3 and await count(conn, "members") == 2
        # good rows pass, several parents in one statement
        await conn.execute(ATTEMPT, ["att-4", "att-5"], ["job-att-1", "job-att-2"], AT)
        await conn.execute(EVENT, ["job-att-1", "job-att-2"], AT)

        # a child's key moved to a missing parent is refused, to a present one allowed
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_members_attempt_id"):
            await conn.execute("UPDATE members SET attempt_id = 'att-none' WHERE id = 'm-1'")
        await conn.execute("UPDATE members SET attempt_id = 'att-4' WHERE id = 'm-1'")
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservation_members_node"):
            await conn.execute("UPDATE reservation_members SET node_gpus = 7")
        await conn.execute("UPDATE members SET reason = 'r'")  # no key changed: no check

        # a parent's key update with children is refused; a node's GPU count cascades
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_attempts_job_id_jobs"):
            await conn.execute("UPDATE jobs SET id = 'job-moved' WHERE id = 'job-att-3'")
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservations_attempt"):
            await conn.execute("UPDATE attempts SET id = 'att-moved' WHERE id = 'att-3'")
        await conn.execute("UPDATE nodes SET gpus = 6 WHERE name = 'n-1'")
        node_gpus = "SELECT node_gpus FROM reservation_members WHERE attempt_id = 'att-2'"
        assert await conn.fetchval(node_gpus) == 6

        # a node with a reservation cannot go; one without can
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservation_members_node"):
            await conn.execute("DELETE FROM nodes WHERE name IN ('n-0', 'n-1')")
        await conn.execute("DELETE FROM reservations WHERE attempt_id = 'att-2'")
        assert await count(conn, "reservation_members") == 1
        await conn.execute("DELETE FROM nodes WHERE name = 'n-1'")

        # TRUNCATE of a parent with children is refused, of parent and child together not
        for table in ("jobs", "attempts", "reservations", "nodes"):
            with pytest.raises(asyncpg.FeatureNotSupportedError):
                await conn.execute(f"TRUNCATE {table} CASCADE")
        # deleting jobs cascades down the whole chain, GPU claims included
        await conn.execute("DELETE FROM jobs WHERE id IN ('job-att-1', 'job-att-2')")
        left = {t: await count(conn, t) for t in ("attempts", "members")}
        assert left == {"attempts": 1, "members": 0}
        gone = "SELECT count(*) FROM job_events WHERE job_id IN ('job-att-1', 'job-att-2')"
        assert await conn.fetchval(gone) == 0
        for table in ("reservations", "reservation_members", "gpu_claims"):
            assert await count(conn, table) == (1 if table == "reservations" else 0)
        await conn.execute("TRUNCATE reservation_members, reservations")

        # downgrade: the foreign keys are back (and checked the rows); upgrade again
        await conn.execute("INSERT INTO reservations VALUES ('att-3', 'job-att-3', 'd', $1)", AT)
        await conn.execute(RES_MEMBER, ["att-3"], [0], ["n-0"])
        await migrate.downgrade_async(empty_db, "0035")
        assert await conn.fetchval(CONSTRAINTS, list(KEYS)) == len(KEYS)
        assert await conn.fetchval(TRIGGERS, [k + "_%" for k in KEYS]) == 0
        await orphans_refused(conn, "att-3")
        await migrate.upgrade_async(empty_db, "0036")
        await orphans_refused(conn, "att-3")
        await conn.execute("DELETE FROM jobs")
        for table in ("attempts", "reservations", "reservation_members", "gpu_claims"):
            assert await count(conn, table) == 0
    finally:
        await conn.close()
