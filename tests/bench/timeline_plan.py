"""The fill store's jobs update on a connection whose first job update moved one job, against one
whose first moved many: the plan PL/pgSQL keeps for the timeline trigger (migration 0039).

One private PostgreSQL, two databases with 10,000 pending jobs each: ``head`` and ``against``
(``--against``, default 0038: the timeline's join). Each round, in each database in turn, on a
new connection each time:

* *one first*: a one-job update (the timeline's statement is planned for a one-row transition
  table, as on a pooled connection whose first job update was a cancel or a supervisor's step),
  then the fill store's jobs update of 1,277 jobs, twice;
* *many first*: the 1,277-job update at once, twice (the benchmarks' connections: their first
  job update was a store batch).

Every update is rolled back. Figures: the backend's CPU over each update
(``/proc/PID/schedstat``), medians over the rounds of the second update of each kind.
Run: ``.venv/bin/python -m tests.bench.timeline_plan --rounds 5``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres

JOBS = (
    "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
    "SELECT 'job-' || i, 'pv-' || i, 'u', 'pending', '{}', now(), now(), 'q' "
    "FROM generate_series(1, $1) AS i"
)
# the fill store's jobs update (adapters/postgres/scheduling.py, _START's first part)
MOVE = (
    "WITH moved AS (UPDATE jobs SET state = 'starting', updated_at = now(), reason = '', "
    "not_before = NULL WHERE id = ANY($1::text[]) AND (state = 'pending') IS TRUE "
    "RETURNING id) SELECT count(*) FROM moved"
)


def cpu_ms(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e6


async def move(conn: asyncpg.Connection, pid: int, ids: list[str]) -> float:
    """The backend's CPU (ms) over one rolled-back update of ``ids``."""
    tx = conn.transaction()
    await tx.start()
    try:
        before = cpu_ms(pid)
        moved = await conn.fetchval(MOVE, ids)
        spent = cpu_ms(pid) - before
        assert moved == len(ids)
    finally:
        await tx.rollback()
    return spent


async def one_round(dsn: str, many: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, first in (("one first", many[:1]), ("many first", many)):
        conn = await asyncpg.connect(dsn)
        try:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await move(conn, pid, first)
            if first is not many:
                out[f"{label}, 1st of {len(many)}"] = await move(conn, pid, many)
            out[f"{label}, {len(many)}"] = await move(conn, pid, many)
        finally:
            await conn.close()
    return out


async def run(args: argparse.Namespace, keep: Path) -> None:
    pg = EmbeddedPostgres(keep / "pg")
    url = pg.start()
    try:

        async def fill(conn: asyncpg.Connection) -> None:
            await conn.execute(JOBS, args.jobs)
            await conn.execute("VACUUM ANALYZE jobs")
            await conn.execute("VACUUM ANALYZE job_events")

        dsns = await two_databases(url, args.against, fill)
        many = [f"job-{i}" for i in range(1, args.moved + 1)]
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in dsns}
        for r in range(args.rounds):
            for name in list(dsns) if r % 2 == 0 else list(dsns)[::-1]:
                runs[name].append(await one_round(dsns[name], many))
        print(f"backend CPU of the jobs update, ms: medians of {args.rounds} rounds (all rounds)")
        print_medians(runs, 6, 1)
    finally:
        pg.stop()


async def two_databases(
    url: str, against: str, fill: Callable[[asyncpg.Connection], Awaitable[None]]
) -> dict[str, str]:
    """The DSNs of ``head`` (the server's database, migrated to head) and of ``against`` (a
    second database on the same server, migrated to that revision), each filled by ``fill``."""
    admin = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    await admin.execute("CREATE DATABASE against")
    await admin.close()
    dsns = {}
    for name, revision in (("head", "head"), (against, against)):
        db_url = url if name == "head" else url.rsplit("/", 1)[0] + "/against"
        await migrate.upgrade_async(db_url, revision)
        dsn = db_url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            await fill(conn)
        finally:
            await conn.close()
        dsns[name] = dsn
    return dsns


def print_medians(runs: dict[str, list[dict[str, float]]], width: int, digits: int) -> None:
    """One line a figure: each database's median over the rounds, then every round's value."""
    for key in next(iter(runs.values()))[0]:
        cells = []
        for name, rounds in runs.items():
            values = [r[key] for r in rounds]
            cells.append(
                f"{name} {statistics.median(values):{width}.{digits}f} "
                f"({', '.join(f'{v:.{digits}f}' for v in values)})"
            )
        print(f"  {key:<30} " + " | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--moved", type=int, default=1_277)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", default="0038")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
