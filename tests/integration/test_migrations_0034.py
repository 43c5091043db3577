"""Migration 0034 (docs/persistence.md, the timeline and the webhook outbox): the outbox is
filled by a statement-level trigger; the same statements write the same outbox rows as the row
trigger of migration 0026 did (one per event and subscription that wants it, none for a disabled
owner, each subscription's rows of a job in the order of its events, the previous state and the
job's reason, owner and queue); a rolled-back statement writes none; downgrading restores the
row trigger with the same rows; upgrading again works."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg
import pytest

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration

AT = datetime(2026, 12, 6, tzinfo=UTC)
# (id, owner, scope, target, states): a user's jobs, a queue's, a team's filtered by state, a
# disabled owner's (nothing), one that matches nobody
SUBSCRIPTIONS = [
    ("s1", "alice", "user", "alice", []),
    ("s2", "alice", "queue", "q1", []),
    ("s3", "bob", "team", "t2", ["starting", "cancelled"]),
    ("s4", "carol", "user", "alice", []),
    ("s5", "bob", "queue", "nobody", []),
]


async def _seed(conn: asyncpg.Connection) -> None:
    for name, disabled in (("alice", False), ("bob", False), ("carol", True)):
        await conn.execute(
            "INSERT INTO users (name, role, disabled) VALUES ($1, 'member', $2)", name, disabled
        )
    await conn.execute("INSERT INTO teams (name) VALUES ('t1'), ('t2')")
    await conn.execute("INSERT INTO queues (name, team) VALUES ('q1', 't1'), ('q2', 't2')")
    for sid, owner, scope, target, states in SUBSCRIPTIONS:
        await conn.execute(
            "INSERT INTO webhook_subscriptions (id, owner, scope, target, url, states, format, "
            "created_at, secret) VALUES ($1, $2, $3, $4, 'https://x.example', $5, 'tuneplane', "
            "$6, 'k')",
            sid,
            owner,
            scope,
            target,
            states,
            AT,
        )


async def _scenario(conn: asyncpg.Connection, prefix: str) -> list[tuple[object, ...]]:
    """Jobs inserted in one statement, moved by several statements (one moving three jobs at
    once, as a scheduling pass does, one rolled back); the outbox rows they wrote, in id order,
    the prefix taken off the job ids."""
    shapes = [("alice", "q1"), ("bob", "q2"), ("alice", "q2"), ("bob", "gone")]
    jobs = [(f"{prefix}{i}", owner, queue) for i, (owner, queue) in enumerate(shapes)]
    await conn.execute(
        "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
        "SELECT id, 'pv-' || id, owner, 'pending', $2, $3, $3, queue "
        "FROM unnest($1::text[], $4::text[], $5::text[]) AS x(id, owner, queue)",
        [j[0] for j in jobs],
        json.dumps({}),
        AT,
        [j[1] for j in jobs],
        [j[2] for j in jobs],
    )
    first = await conn.fetchval("SELECT coalesce(max(id), 0) FROM webhook_outbox")
    ids = [j[0] for j in jobs]
    await conn.execute(
        "UPDATE jobs SET state = 'starting', reason = 'placed', updated_at = $2 "
        "WHERE id = ANY($1::text[]) AND queue <> 'gone'",
        ids,
        AT,
    )
    with pytest.raises(asyncpg.CheckViolationError):  # a bad state: the statement rolls back
        async with conn.transaction():
            await conn.execute("UPDATE jobs SET state = 'cancelled' WHERE id = $1", ids[0])
            await conn.execute("UPDATE jobs SET state = 'nonsense' WHERE id = $1", ids[1])
    await conn.execute(
        "UPDATE jobs SET state = 'cancelled', updated_at = $2 WHERE id = ANY($1::text[])",
        ids,
        AT,
    )
    await conn.execute("UPDATE jobs SET reason = 'noted' WHERE id = $1", ids[0])  # no event
    rows = await conn.fetch(
        "SELECT subscription_id, job_id, seq, state, previous_state, reason, owner, queue, at, "
        "status, attempts FROM webhook_outbox WHERE id > $1 ORDER BY id",
        first,
    )
    out = [tuple(r) for r in rows]
    return [(r[0], str(r[1]).removeprefix(prefix), *r[2:]) for r in out]


async def test_the_statement_trigger_writes_what_the_row_trigger_wrote(empty_db: str) -> None:
    await migrate.upgrade_async(empty_db, "0033")
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        await _seed(conn)
        by_row = await _scenario(conn, "a-")
        # jobs 0, 1, 2 start, then all four are cancelled: alice's (0 in q1, 2 in q2) to s1, q1's
        # (0) to s2, team t2's (1 and 2, in q2) to s3; none to s4 (disabled), s5, or for job 3
        expected = [("s1", "0"), ("s2", "0"), ("s3", "1"), ("s1", "2"), ("s3", "2")]
        assert [(r[0], r[1]) for r in by_row] == expected * 2
        assert [r[3] for r in by_row] == ["starting"] * 5 + ["cancelled"] * 5
        assert {r[4] for r in by_row[:5]} == {"pending"}
        assert {r[4] for r in by_row[5:]} == {"starting"}
        await migrate.upgrade_async(empty_db, "0034")
        trigger = "SELECT tgtype & 1 FROM pg_trigger WHERE tgname = 'job_events_webhooks'"
        assert await conn.fetchval(trigger) == 0  # FOR EACH STATEMENT
        by_statement = await _scenario(conn, "b-")
        assert by_statement == by_row
        # each (subscription, job)'s rows in the order of the job's events
        seqs: dict[tuple[object, object], list[int]] = {}
        for r in by_statement:
            assert isinstance(r[2], int)
            seqs.setdefault((r[0], r[1]), []).append(r[2])
        assert all(s == sorted(s) for s in seqs.values())
        await migrate.downgrade_async(empty_db, "0033")
        assert await conn.fetchval(trigger) == 1  # FOR EACH ROW again
        assert await _scenario(conn, "c-") == by_row
        await migrate.upgrade_async(empty_db, "head")
        assert await _scenario(conn, "d-") == by_row
    finally:
        await conn.close()
