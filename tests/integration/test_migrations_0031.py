"""Migration 0031 on a database with jobs (docs/scheduling.md, "Incremental snapshot"): every
job gets ``changed`` (existing ones too) and every later write moves it to the writing
transaction, whatever SQL makes it; the timeline, now recorded per statement, still gets one
event per job moved, numbered after its earlier ones; downgrading restores the row trigger."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
import pytest

from adapters.postgres import migrate
from tests.support.reservation_rows import migrated

pytestmark = pytest.mark.integration

AT = datetime(2026, 1, 1, tzinfo=UTC)
XACT = "SELECT CAST(CAST(pg_current_xact_id() AS text) AS bigint)"


async def add_job(conn: asyncpg.Connection, job_id: str) -> None:
    await conn.execute(
        "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at) "
        "VALUES ($1, $2, 'alice', 'pending', $3, $4, $4)",
        job_id,
        "pv-" + job_id,
        json.dumps({"queue": "default"}),
        AT,
    )


async def events(conn: asyncpg.Connection) -> list[tuple[str, int, str, str]]:
    rows = await conn.fetch("SELECT job_id, seq, state, reason FROM job_events ORDER BY 1, 2")
    return [tuple(r) for r in rows]


async def test_jobs_carry_the_last_writer_and_events_are_recorded_per_statement(
    empty_db: str,
) -> None:
    conn = await migrated(empty_db, "0030")
    try:
        await add_job(conn, "old")
        await migrate.upgrade_async(empty_db, "0031")
        assert await conn.fetchval("SELECT changed FROM jobs WHERE id = 'old'") > 0
        async with conn.transaction():
            await add_job(conn, "new")
            mine = await conn.fetchval(XACT)
            assert await conn.fetchval("SELECT changed FROM jobs WHERE id = 'new'") == mine
        async with conn.transaction():  # one statement moves both; one changes only a reason
            await conn.execute(
                "UPDATE jobs SET state = 'cancelled', reason = 'stop', updated_at = $1", AT
            )
            await conn.execute("UPDATE jobs SET reason = 'noted' WHERE id = 'new'")
            mine = await conn.fetchval(XACT)
        changed = await conn.fetch("SELECT changed FROM jobs")
        assert {r["changed"] for r in changed} == {mine}
        assert await events(conn) == [
            ("new", 1, "pending", ""),
            ("new", 2, "cancelled", "stop"),
            ("old", 1, "pending", ""),
            ("old", 2, "cancelled", "stop"),
        ]
        await migrate.downgrade_async(empty_db, "0030")
        await conn.execute("UPDATE jobs SET state = 'pending', updated_at = $1", AT)
        assert len(await events(conn)) == 6  # the row trigger is back
        await migrate.upgrade_async(empty_db, "head")
    finally:
        await conn.close()
