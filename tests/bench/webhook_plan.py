"""Single job moves on a connection whose first webhook fill was a scheduling pass's (many
events), against one whose first was a single event: the plan PL/pgSQL keeps for the
``webhook_outbox_fill`` trigger (migration 0040).

One private PostgreSQL, two databases (``head`` and ``--against``, default 0039: the fill's join
as 0034 wrote it), each with ``--jobs`` pending jobs of one owner and one webhook subscription
that wants every change of that owner's jobs. Each round, in each database in turn, on a new
connection each time:

* *many first*: one update that moves ``--moved`` jobs (the timeline records as many events and
  the trigger fills as many outbox rows), then ``--singles`` updates of one job each;
* *one first*: one update of one job, then the same single updates, then the many-job update.

Every update is rolled back. Figures: the backend's CPU over each update (``/proc/PID/schedstat``),
medians over the rounds. Run: ``.venv/bin/python -m tests.bench.webhook_plan --rounds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

import asyncpg

from adapters.postgres.embedded import EmbeddedPostgres
from tests.bench.timeline_plan import JOBS, cpu_ms, print_medians, two_databases

MOVE = (
    "WITH moved AS (UPDATE jobs SET state = 'starting', updated_at = now(), reason = '' "
    "WHERE id = ANY($1::text[]) AND state = 'pending' RETURNING id) SELECT count(*) FROM moved"
)
SUBSCRIPTION = (
    "INSERT INTO webhook_subscriptions (id, owner, scope, target, url, format, created_at, "
    "secret) VALUES ('wh-1', 'u', 'user', 'u', 'https://example.invalid/', 'tuneplane', now(), "
    "'s')"
)


async def move(conn: asyncpg.Connection, pid: int, ids: list[str]) -> float:
    """The backend's CPU (ms) over one rolled-back update of ``ids`` (checked: each job moved,
    one outbox row each)."""
    tx = conn.transaction()
    await tx.start()
    try:
        before = cpu_ms(pid)
        moved = await conn.fetchval(MOVE, ids)
        spent = cpu_ms(pid) - before
        assert moved == len(ids)
        filled = await conn.fetchval("SELECT count(*) FROM webhook_outbox")
        assert filled == len(ids), (filled, len(ids))
    finally:
        await tx.rollback()
    return spent


async def one_round(dsn: str, many: list[str], singles: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    conn = await asyncpg.connect(dsn)
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        out[f"many first: {len(many)}"] = await move(conn, pid, many)
        after = [await move(conn, pid, [one]) for one in singles]
        out["many first: then 1 (median)"] = statistics.median(after)
    finally:
        await conn.close()
    conn = await asyncpg.connect(dsn)
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await move(conn, pid, singles[:1])
        after = [await move(conn, pid, [one]) for one in singles]
        out["one first: then 1 (median)"] = statistics.median(after)
        out[f"one first: then {len(many)}"] = await move(conn, pid, many)
    finally:
        await conn.close()
    return out


async def run(args: argparse.Namespace, keep: Path) -> None:
    pg = EmbeddedPostgres(keep / "pg")
    url = pg.start()
    try:

        async def fill(conn: asyncpg.Connection) -> None:
            await conn.execute(JOBS, args.jobs)
            await conn.execute(SUBSCRIPTION)
            await conn.execute("VACUUM ANALYZE jobs, job_events, webhook_subscriptions")

        dsns = await two_databases(url, args.against, fill)
        many = [f"job-{i}" for i in range(1, args.moved + 1)]
        singles = [f"job-{args.jobs - i}" for i in range(args.singles)]
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in dsns}
        for r in range(args.rounds):
            for name in list(dsns) if r % 2 == 0 else list(dsns)[::-1]:
                runs[name].append(await one_round(dsns[name], many, singles))
        print(
            f"backend CPU of the update, ms ({args.jobs:,} jobs, one webhook): medians of "
            f"{args.rounds} rounds (all rounds)"
        )
        print_medians(runs, 7, 2)
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--moved", type=int, default=1_277)
    parser.add_argument("--singles", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", default="0039")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
