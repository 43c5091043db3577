"""What each part of the schema costs the store of a pass that fills an empty fleet (not part of
the test suite): 10,000 pending jobs over 1,000 nodes, one ``decide``, then its two store
statements (the jobs statement and the reserve statement, ``adapters/postgres/scheduling.py``
and ``reservations.py``) run again and again in a transaction that is rolled back, once as the
schema is and once with each part taken away inside that transaction (a trigger disabled, a
constraint or index dropped).

Each statement is measured by the server CPU of the backend that ran it (``/proc/PID/schedstat``
of ``pg_backend_pid()``: the embedded server runs on this machine), which the machine's load
changes much less than wall time. The median of ``--reps`` runs per variant is printed; the
difference to "as is" is what that part costs. A part taken away here is a measurement, never a
proposal: each one carries a guarantee (docs/persistence.md).

Run: ``.venv/bin/python -m tests.bench.bench_store_parts`` (``--schema 0036`` for the schema
before 0037 (a claim row a GPU), ``0035`` before 0036, ``0034`` before 0035); ``--against 0036
--reps 15``: the store as is in turn with the store of a second database migrated to 0036, no
parts taken away.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import make_url, text

from adapters.postgres import migrate
from adapters.postgres.connect import async_url, plain_url
from adapters.postgres.embedded import EmbeddedPostgres
from adapters.postgres.engine import create_engine
from adapters.postgres.reservations import _RESERVE_MANY, reserve_many_params
from adapters.postgres.scheduling import _START, start_params
from adapters.postgres.uow import PostgresUnitOfWork
from application.scheduler import Scheduler
from tests.bench.admission_report import load
from tests.bench.bench_admission import make_ctx, populate, workload

TABLES = "jobs, attempts, members, job_events, reservations, reservation_members, nodes"
# the GPU-overlap check as the schema has it: the claims' trigger (a row a GPU in 0035, a mask
# a node since 0037), or 0032's exclusion
NO_OVERLAP_CHECK = {
    "claims": ["ALTER TABLE reservation_members DISABLE TRIGGER gpu_claims_inserted"],
    "0034": ["ALTER TABLE reservation_members DROP CONSTRAINT ex_reservation_members_gpus"],
}
# the foreign keys on the store's path, by the child each checks
KEYS = {
    "job_events -> jobs": [("job_events", "fk_job_events_job_id_jobs")],
    "attempts -> jobs, members -> attempts": [
        ("attempts", "fk_attempts_job_id_jobs"),
        ("members", "fk_members_attempt_id_attempts"),
    ],
    "reservation_members -> reservations -> attempts": [
        ("reservation_members", "fk_reservation_members_attempt_id_reservations"),
        ("reservations", "fk_reservations_attempt_id_attempts"),
    ],
    "reservation_members -> nodes": [("reservation_members", "fk_reservation_members_node_nodes")],
}
JOB_INDEXES = (
    "created_at_id",
    "owner_created_at_id",
    "state_created_at_id",
    "state_queue_created_at_id",
    "queue_created_at_id",
    "changed",
)
OTHER: dict[str, list[str]] = {
    "no jobs_changed trigger": ["ALTER TABLE jobs DISABLE TRIGGER jobs_changed"],
    "no timeline trigger (its job_events insert)": [
        "ALTER TABLE jobs DISABLE TRIGGER jobs_record_events_updated"
    ],
    "no jobs indexes on state (2)": [
        "DROP INDEX ix_jobs_state_created_at_id",
        "DROP INDEX ix_jobs_state_queue_created_at_id",
    ],
    "no jobs index on changed": ["DROP INDEX ix_jobs_changed"],
    # the upper bound of moving state and changed to a narrow table: no index entry but the
    # key's for a moved job (its row is rewritten either way: the pages are full)
    "no jobs indexes but its key (7)": [
        *(f"DROP INDEX ix_jobs_{i}" for i in JOB_INDEXES),
        "ALTER TABLE jobs DROP CONSTRAINT uq_jobs_preview_id",
    ],
}


def variants(schema: str) -> dict[str, list[str]]:
    """Each part taken away, as this schema has it: foreign keys before 0036, their statement
    triggers from 0036 on (migration 0036_statement_foreign_keys)."""
    triggers = schema not in ("0034", "0035")
    found: dict[str, list[str]] = {
        "as is": [],
        "no GPU-overlap check": NO_OVERLAP_CHECK["0034" if schema == "0034" else "claims"],
    }
    for name, keys in KEYS.items():
        found[f"no FK {name}"] = [
            f"ALTER TABLE {child} DISABLE TRIGGER {key}_inserted"
            if triggers
            else f"ALTER TABLE {child} DROP CONSTRAINT {key}"
            for child, key in keys
        ]
    return {**found, **OTHER, "as is, again": []}


async def run(args: argparse.Namespace, keep: Path) -> None:
    pg = EmbeddedPostgres(keep / "pg")
    url = pg.start()
    try:
        await migrate.upgrade_async(url, args.schema)
        engine = create_engine(url, pool_size=2)
        try:
            uow = lambda: PostgresUnitOfWork(engine)  # noqa: E731
            await populate(uow, args.nodes, workload(args.jobs, args.seed))
            ctx = make_ctx(uow)
            sched = Scheduler(ctx)
            decisions, attempts = await sched.decide()
            now = ctx.clock.now()
            starts = [
                sched._build(p, attempts.get(p.job_id, 0) + 1, now) for p in decisions.placements
            ]
            members = sum(len(s.members) for s in starts)
            print(f"{len(starts)} placements, {members} members; load average {load()}")
            params = (
                start_params(starts, now),
                reserve_many_params([s.reservation for s in starts]),
            )
            # one run thrown away: the first after populating was 20-40 ms dearer in every run
            # of session 43 (pages and the backend's caches cold)
            await measure(engine, [], params, 1)
            if args.against:
                await against(url, engine, args, params, len(starts))
                return
            for name, ddl in variants(args.schema).items():
                jobs, reserve = await measure(engine, ddl, params, args.reps)
                print(f"{name:55s} server CPU: jobs {jobs:6.1f} ms, reserve {reserve:6.1f} ms, "
                      f"sum {jobs + reserve:6.1f} ms = {1e3 * (jobs + reserve) / len(starts):5.1f} "
                      "us a placement", flush=True)  # fmt: skip
        finally:
            await engine.dispose()
    finally:
        pg.stop()
    print(f"load average after: {load()}")


async def against(
    url: str, engine: Any, args: argparse.Namespace, params: Any, placements: int
) -> None:
    """The same store "as is" in this database and in one migrated to ``--against`` (the same
    server, the same rows), one run each in turn, ``--reps`` rounds: an A/B that the load
    changes alike."""
    admin = await asyncpg.connect(plain_url(url))
    try:
        await admin.execute("CREATE DATABASE against")
    finally:
        await admin.close()
    other_url = make_url(async_url(url)).set(database="against").render_as_string(False)
    await migrate.upgrade_async(other_url, args.against)
    other = create_engine(other_url, pool_size=2)
    try:
        await populate(
            lambda: PostgresUnitOfWork(other), args.nodes, workload(args.jobs, args.seed)
        )
        runs: dict[str, list[float]] = {args.against: [], args.schema: []}
        for _ in range(args.reps):
            for name, eng in ((args.against, other), (args.schema, engine)):
                jobs, reserve = await measure(eng, [], params, 1)
                runs[name].append(jobs + reserve)
        for name, sums in runs.items():
            median = statistics.median(sums)
            print(f"schema {name:5s}: store server CPU median {median:6.1f} ms = "
                  f"{1e3 * median / placements:5.1f} us a placement "
                  f"(runs: {', '.join(f'{v:.1f}' for v in sums)})", flush=True)  # fmt: skip
    finally:
        await other.dispose()


async def measure(
    engine: Any, ddl: list[str], params: tuple[dict[str, Any], dict[str, Any]], reps: int
) -> tuple[float, float]:
    """Median server CPU (ms) of the two statements over ``reps`` rolled-back runs."""
    jobs, reserve = [], []
    for _ in range(reps):
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text(f"VACUUM ANALYZE {TABLES}"))  # no dead rows of the last run
        async with engine.connect() as conn:
            tx = await conn.begin()
            for statement in ddl:
                await conn.execute(text(statement))
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()
            c0 = cpu_ns(pid)
            await conn.execute(_START, params[0])
            c1 = cpu_ns(pid)
            await conn.execute(_RESERVE_MANY, params[1])
            c2 = cpu_ns(pid)
            await tx.rollback()
        jobs.append((c1 - c0) / 1e6)
        reserve.append((c2 - c1) / 1e6)
    return statistics.median(jobs), statistics.median(reserve)


def cpu_ns(pid: int) -> int:
    """The CPU time a process has run, in ns (the first field of its schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--schema", default="head", help="migrate to this revision (head, 0035, 0034)"
    )
    parser.add_argument(
        "--against", help="A/B: the store as is here and in a database at this revision, in turn"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
