"""Migration 0039 (docs/persistence.md, "Plans that do not depend on statistics"): the timeline's
update trigger pairs old and new rows by grouping, so the plan a connection keeps for it is never
a nested loop over the transition tables, whatever the first update it ran for; the events it
records are the same before and after, and downgrading gives 0031's function back."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.db import plain_dsn
from tests.support.reservation_rows import migrated

pytestmark = pytest.mark.integration

JOBS = (
    "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue, reason) "
    "SELECT $1 || i, $1 || 'pv-' || i, 'u', 'pending', '{}', now(), now(), 'q', 'waiting' "
    "FROM generate_series(1, $2) AS i"
)
MOVE = (
    "UPDATE jobs SET state = 'starting', reason = '', updated_at = now() WHERE id = ANY($1::text[])"
)
EVENTS = "SELECT job_id, seq, state, reason FROM job_events WHERE job_id = ANY($1::text[])"


async def events(conn: asyncpg.Connection, ids: Sequence[str]) -> set[tuple[str, int, str, str]]:
    return {tuple(r) for r in await conn.fetch(EVENTS, list(ids))}


async def record_some(conn: asyncpg.Connection, prefix: str) -> set[tuple[str, int, str, str]]:
    """Four updates of three jobs, each kind of change once: the state and the reason, the
    state alone, the reason alone, nothing; the events they recorded."""
    await conn.execute(JOBS, prefix, 3)
    a, b, c = (f"{prefix}{i}" for i in (1, 2, 3))
    await conn.execute(MOVE, [a, b])  # state and reason: events 2 with reason ''
    await conn.execute("UPDATE jobs SET state = 'running' WHERE id = $1", a)  # state: ''
    await conn.execute("UPDATE jobs SET reason = 'why' WHERE id = ANY($1::text[])", [b, c])
    await conn.execute("UPDATE jobs SET state = 'failed', reason = 'oom' WHERE id = $1", b)
    await conn.execute("UPDATE jobs SET updated_at = now() WHERE id = ANY($1::text[])", [a, c])
    return await events(conn, [a, b, c])


def expected(prefix: str) -> set[tuple[str, int, str, str]]:
    a, b, c = (f"{prefix}{i}" for i in (1, 2, 3))
    return {
        (a, 1, "pending", "waiting"), (a, 2, "starting", ""), (a, 3, "running", ""),
        (b, 1, "pending", "waiting"), (b, 2, "starting", ""), (b, 3, "failed", "oom"),
        (c, 1, "pending", "waiting"),
    }  # fmt: skip


async def timeline_plan_after_one(dsn: str, prefix: str) -> str:
    """On a new connection: one job moved, then 200 (in one statement); the plan the timeline's
    insert ran with in the second (auto_explain at NOTICE, nested statements). Rolled back."""
    conn = await asyncpg.connect(dsn)
    notices: list[str] = []
    conn.add_log_listener(lambda _c, message: notices.append(str(message.message)))
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute(JOBS, prefix, 201)
        await conn.execute(MOVE, [f"{prefix}1"])
        await conn.execute(
            "SET LOCAL auto_explain.log_min_duration = 0; "
            "SET LOCAL auto_explain.log_nested_statements = on; "
            "SET LOCAL auto_explain.log_level = 'notice'"
        )
        await conn.execute(MOVE, [f"{prefix}{i}" for i in range(2, 202)])
    finally:
        await tx.rollback()
        await conn.close()
    plans = [n for n in notices if "INSERT INTO job_events" in n and "old_jobs" in n]
    assert len(plans) == 1, notices
    return plans[0]


async def test_the_timeline_records_the_same_events_up_and_down(empty_db: str) -> None:
    conn = await migrated(empty_db, "0038")
    try:
        before = await record_some(conn, "old-")
        assert before == expected("old-")
        await migrate.upgrade_async(empty_db, "0039")
        assert await record_some(conn, "new-") == expected("new-")
        assert await events(conn, ["old-1", "old-2", "old-3"]) == before  # left alone
        # downgrade: 0031's function again, the same events
        await migrate.downgrade_async(empty_db, "0038")
        assert await record_some(conn, "down-") == expected("down-")
        await migrate.upgrade_async(empty_db, "head")
        assert await record_some(conn, "head-") == expected("head-")
    finally:
        await conn.close()


async def test_the_timeline_plan_holds_whatever_the_first_update(contrib_empty_db: str) -> None:
    """On a server with contrib (auto_explain): Debian's, beside the test session's own."""
    await (await migrated(contrib_empty_db, "0038")).close()
    dsn = plain_dsn(contrib_empty_db)
    trap = await timeline_plan_after_one(dsn, "t38-")
    assert "Nested Loop" in trap  # 0031's join, planned for one row: a loop in a loop

    await migrate.upgrade_async(contrib_empty_db, "0039")
    plan = await timeline_plan_after_one(dsn, "t39-")
    assert "Nested Loop" not in plan
    assert plan.count("Named Tuplestore Scan") == 2  # each transition table read once
