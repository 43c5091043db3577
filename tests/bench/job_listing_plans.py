"""Does every reader of ``jobs`` by state and queue stay bounded without
``ix_jobs_state_queue_created_at_id``? (docs/benchmarks.md, session 46, continued.)

A private PostgreSQL at head, ``--rows`` jobs loaded straight by SQL (the timeline and key
triggers off for the load: ``session_replication_role = replica``) in a skewed mix: most of
them in one queue and state, a few of the asked state in the asked queue, the oldest. Then the
listing ``GET /v1/jobs?state=&queue=`` (the statement of ``PostgresJobRepository.list``, first
page and a cursor page) and the scheduler's and the claim's reads of jobs by state, each
``EXPLAIN (ANALYZE, BUFFERS)`` with the index and without it (dropped in a transaction rolled
back), on the table vacuumed but never analyzed and then analyzed. Prints each plan's first
lines, its buffers and its time. Run: ``.venv/bin/python -m tests.bench.job_listing_plans``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import asyncpg

from tests.bench.admission_report import load

LIST = (
    "SELECT * FROM jobs WHERE queue = $1 AND state IN ({states}) {cursor}"
    "ORDER BY created_at DESC, id DESC LIMIT 51"
)
READERS = {
    "list state=failed&queue=q1": (LIST.format(states="'failed'", cursor=""), ["q1"]),
    "list state=failed&queue=q1, cursor page": (
        LIST.format(
            states="'failed'",
            cursor="AND (created_at, id) < (timestamptz '2026-01-02 00:00:00+00', 'job-x') ",
        ),
        ["q1"],
    ),
    "list state=succeeded,failed&queue=q1": (
        LIST.format(states="'succeeded', 'failed'", cursor=""),
        ["q1"],
    ),
    "list state=pending&queue=q0": (LIST.format(states="'pending'", cursor=""), ["q0"]),
    "claim (state in stopping)": (
        "SELECT * FROM jobs WHERE state IN ('stopping') ORDER BY created_at, id LIMIT 100 "
        "FOR UPDATE SKIP LOCKED",
        [],
    ),
}
INDEX = "ix_jobs_state_queue_created_at_id"


async def fill(conn: asyncpg.Connection, rows: int) -> None:
    """``rows`` jobs: 1 % pending in q0; half the rest succeeded in q1, the other half failed
    in q0; and 20 failed in q1, the oldest of all (the listing's worst case: its rows are
    behind every other row of the state and of the queue)."""
    await conn.execute("SET session_replication_role = replica")
    spec = '{"queue": "x", "roles": []}'
    await conn.execute(
        "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
        "SELECT 'job-' || lpad(i::text, 8, '0'), 'pv-' || i, 'bench', "
        "CASE WHEN i <= 20 THEN 'failed' WHEN i % 100 = 0 THEN 'pending' "
        "     WHEN i % 2 = 0 THEN 'succeeded' ELSE 'failed' END, "
        "$1::jsonb, timestamptz '2026-01-01' + i * interval '1 second', "
        "timestamptz '2026-01-01' + i * interval '1 second', "
        "CASE WHEN i <= 20 THEN 'q1' WHEN i % 100 = 0 THEN 'q0' "
        "     WHEN i % 2 = 0 THEN 'q1' ELSE 'q0' END "
        "FROM generate_series(1, $2) i",
        spec,
        rows,
    )
    await conn.execute("RESET session_replication_role")


async def explain(conn: asyncpg.Connection, sql: str, args: list[str]) -> str:
    plan = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args)
    lines = [r[0] for r in plan]
    head = [ln.strip() for ln in lines if "Scan" in ln or "Filter" in ln or "Sort" in ln]
    buffers = next((ln.strip() for ln in lines if "Buffers" in ln), "")
    timing = next((ln.strip() for ln in lines if ln.startswith("Execution Time")), "")
    return f"{' | '.join(head[:4])}\n      {buffers}; {timing}"


async def main(args: argparse.Namespace) -> None:
    from adapters.postgres import migrate
    from adapters.postgres.embedded import EmbeddedPostgres

    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg")
        url = pg.start()
        try:
            await migrate.upgrade_async(url, "head")
            conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                await fill(conn, args.rows)
                await conn.execute("VACUUM jobs")
                for stats in ("vacuumed, never analyzed", "analyzed"):
                    if stats == "analyzed":
                        await conn.execute("ANALYZE jobs")
                    print(f"\n== {args.rows:,} jobs, {stats}")
                    for name, (sql, params) in READERS.items():
                        for dropped in (False, True):
                            tx = conn.transaction()
                            await tx.start()
                            try:
                                if dropped:
                                    await conn.execute(f"DROP INDEX {INDEX}")
                                plan = await explain(conn, sql, params)
                            finally:
                                await tx.rollback()
                            side = "without the index" if dropped else "with the index"
                            print(f"  {name}, {side}:\n      {plan}")
            finally:
                await conn.close()
        finally:
            pg.stop()
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    asyncio.run(main(parser.parse_args()))
