"""Where the fill store's server CPU goes, table by table (not part of the test suite): the two
store statements of a pass that fills an empty fleet (10,000 pending jobs, 1,000 nodes) split
into the six writes they make, each its own statement in one transaction that is rolled back:
the jobs' update (with its timeline trigger), the attempts, the members, the nodes' counters,
the reservations, the reservation members (with their GPU claims). Each write is measured by
the server CPU of the backend (``/proc/PID/schedstat``) and the WAL it inserted; its rows come
from the statement's row count. Split so, the six writes cost about what the two statements do
(session 46, the same minutes: 115 against 120 ms; the CTEs add little but passing ids along).

Variants take one part away inside the rolled-back transaction (a trigger disabled, an index or
constraint dropped): the difference to "as is" is what that part costs. Every variant runs once
in each round, in turn, so that the machine's load moves them alike; medians of ``--reps``
rounds. A part taken away is a measurement, never a proposal (docs/persistence.md).

Run: ``.venv/bin/python -m tests.bench.bench_store_tables`` (``--variants`` to pick some by the
start of their names, ``--schema 0037`` for an older schema, ``--against 0037``: the writes as
they are in turn with a second database at that revision, no part taken away; ``--released``:
a store committed and released first, so that the GPU masks' rows exist and are updated).
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
from adapters.postgres.arrays import literal_params
from adapters.postgres.connect import async_url, plain_url
from adapters.postgres.embedded import EmbeddedPostgres
from adapters.postgres.engine import create_engine
from adapters.postgres.reservations import reserve_many_params
from adapters.postgres.scheduling import start_params
from adapters.postgres.uow import PostgresUnitOfWork
from application.scheduler import Scheduler
from tests.bench.admission_report import load
from tests.bench.bench_admission import make_ctx, populate, workload
from tests.bench.bench_store_parts import cpu_ns

TABLES = "jobs, attempts, members, job_events, reservations, reservation_members, nodes"


def _unnest(columns: str, types: str, prefix: str) -> str:
    return ", ".join(
        f"CAST(:{prefix}_{c} AS {t}[])" for c, t in zip(columns.split(), types.split(), strict=True)
    )


# the six writes, as _START (scheduling.py) and _RESERVE_MANY (reservations.py) make them;
# the value: (statement, which parameters: 0 start_params, 1 reserve_many_params)
WRITES: dict[str, tuple[str, int]] = {
    "jobs": (
        "UPDATE jobs SET state = 'starting', updated_at = :now, reason = '', not_before = NULL "
        "WHERE id = ANY(CAST(:ids AS text[])) AND (state = 'pending') IS TRUE",
        0,
    ),
    "attempts": (
        "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at, reason, "
        "exit_code, cause) SELECT * FROM unnest("
        + _unnest(
            "id job number state created updated reason exit cause",
            "text text int text timestamptz timestamptz text int text",
            "a",
        )
        + ")",
        0,
    ),
    "members": (
        "INSERT INTO members (id, attempt_id, index, state, handle, exit_code, reason, "
        "updated_at, node, role) SELECT * FROM unnest("
        + _unnest(
            "id attempt index state handle exit reason updated node role",
            "text text int text text int text timestamptz text text",
            "m",
        )
        + ")",
        0,
    ),
    "nodes": (
        "UPDATE nodes n SET used_mcpu = n.used_mcpu + d.mcpu, "
        "used_memory_mb = n.used_memory_mb + d.memory_mb FROM unnest("
        + _unnest("node mcpu memory", "text int int", "d")
        + ") AS d(node, mcpu, memory_mb) WHERE n.name = d.node",
        1,
    ),
    "reservations": (
        "INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) SELECT * FROM unnest("
        + _unnest("attempt job queue at", "text text text timestamptz", "r")
        + ")",
        1,
    ),
    "reservation_members": (
        "WITH g AS (SELECT y.attempt_id, y.member, "
        "range_agg(int4range(u.slot * 64 + y.lo, u.slot * 64 + y.hi)) AS gpus FROM unnest("
        + _unnest("attempt member node lo hi", "text int text int int", "g")
        + ") AS y(attempt_id, member, node, lo, hi) JOIN nodes u ON u.name = y.node "
        "GROUP BY y.attempt_id, y.member) "
        "INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
        "node_slot, node_gpus, gpus) SELECT x.*, u.slot, u.gpus, coalesce(g.gpus, '{}') "
        "FROM unnest("
        + _unnest("attempt member role node mcpu memory", "text int text text int int", "m")
        + ") AS x(attempt_id, member, role, node, mcpu, memory_mb) "
        "LEFT JOIN nodes u ON u.name = x.node "
        "LEFT JOIN g ON g.attempt_id = x.attempt_id AND g.member = x.member",
        1,
    ),
}
SHORT = {"jobs": "jobs", "attempts": "att", "members": "mem", "nodes": "nodes",
         "reservations": "res", "reservation_members": "resmem"}  # fmt: skip
every_label = [False]  # per-row figures of every label (the A/B) or only the first
STATEMENTS = {name: (text(literal_params(sql)), which) for name, (sql, which) in WRITES.items()}


def _trigger(table: str, trigger: str) -> list[str]:
    return [f"ALTER TABLE {table} DISABLE TRIGGER {trigger}"]


JOB_INDEXES = ("created_at_id", "owner_created_at_id", "state_created_at_id",
               "state_queue_created_at_id", "queue_created_at_id", "changed")  # fmt: skip
VARIANTS: dict[str, list[str]] = {
    "as is": [],
    "jobs: no jobs_changed row trigger": _trigger("jobs", "jobs_changed"),
    "jobs: no timeline trigger": _trigger("jobs", "jobs_record_events_updated"),
    "jobs: timeline without its job_events -> jobs check": _trigger(
        "job_events", "fk_job_events_job_id_jobs_inserted"
    ),
    **{f"jobs: no index ix_jobs_{i}": [f"DROP INDEX ix_jobs_{i}"] for i in JOB_INDEXES},
    "jobs: no uq_jobs_preview_id": ["ALTER TABLE jobs DROP CONSTRAINT uq_jobs_preview_id"],
    "attempts: no attempts -> jobs check": _trigger("attempts", "fk_attempts_job_id_jobs_inserted"),
    "attempts: no uq (job_id, number)": [
        "ALTER TABLE attempts DROP CONSTRAINT uq_attempts_job_id_number"
    ],
    "members: no members -> attempts check": _trigger(
        "members", "fk_members_attempt_id_attempts_inserted"
    ),
    "members: no uq (attempt_id, index)": [
        "ALTER TABLE members DROP CONSTRAINT uq_members_attempt_id_index"
    ],
    "reservations: no reservations -> attempts check": _trigger(
        "reservations", "fk_reservations_attempt_id_attempts_inserted"
    ),
    "reservation_members: no -> reservations check": _trigger(
        "reservation_members", "fk_reservation_members_attempt_id_reservations_inserted"
    ),
    "reservation_members: no -> nodes check": _trigger(
        "reservation_members", "fk_reservation_members_node_nodes_inserted"
    ),
    "reservation_members: no GPU claims": _trigger("reservation_members", "gpu_claims_inserted"),
    "reservation_members: no index on node": ["DROP INDEX ix_reservation_members_node"],
}

Params = tuple[dict[str, Any], dict[str, Any]]


async def one_run(
    engine: Any, ddl: list[str], params: Params
) -> dict[str, tuple[float, float, int]]:
    """The six writes once, rolled back, after ``ddl``: {write: (server CPU ms, WAL bytes,
    rows)}."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        # no dead rows of the last run
        await conn.execute(text(f"VACUUM ANALYZE {TABLES}, gpu_claims"))
    out: dict[str, tuple[float, float, int]] = {}
    async with engine.connect() as conn:
        tx = await conn.begin()
        for change in ddl:
            await conn.execute(text(change))
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()
        lsn = text("SELECT pg_current_wal_insert_lsn()")
        since = text("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :mark)")
        for name, (write, which) in STATEMENTS.items():
            mark = (await conn.execute(lsn)).scalar()
            c0 = cpu_ns(pid)
            rows = (await conn.execute(write, params[which])).rowcount
            c1 = cpu_ns(pid)
            wal = (await conn.execute(since, {"mark": mark})).scalar()
            out[name] = ((c1 - c0) / 1e6, float(wal or 0), rows)
        await tx.rollback()
    return out


def medians(runs: list[dict[str, tuple[float, float, int]]]) -> dict[str, tuple[float, float, int]]:
    return {
        name: (
            statistics.median(r[name][0] for r in runs),
            statistics.median(r[name][1] for r in runs),
            runs[0][name][2],
        )
        for name in STATEMENTS
    }


def line(label: str, m: dict[str, tuple[float, float, int]]) -> str:
    total = sum(v[0] for v in m.values())
    return f"{label:52s} {total:6.1f} |" + "".join(f" {v[0]:6.1f}" for v in m.values())


async def compare(
    engines: dict[str, Any], ddl: dict[str, list[str]], params: Params, reps: int
) -> None:
    """Each (label → engine, ddl) once a round, in turn; medians printed after every round."""
    runs: dict[str, list[dict[str, tuple[float, float, int]]]] = {k: [] for k in engines}
    for _ in range(reps):
        for label, engine in engines.items():
            runs[label].append(await one_run(engine, ddl[label], params))
    header = f"server CPU ms, medians of {reps}"
    print(f"{header:52s}  total |" + "".join(f" {SHORT[n]:>6s}" for n in STATEMENTS))
    for label, r in runs.items():
        print(line(label, medians(r)), flush=True)
    for label, r in runs.items():  # every label's rows, WAL and cost a row (an A/B), or the first's
        m = medians(r)
        print(f"{label}: rows " + ", ".join(f"{SHORT[n]} {v[2]}" for n, v in m.items()))
        print(f"{label}: WAL bytes " + ", ".join(f"{SHORT[n]} {v[1]:,.0f}" for n, v in m.items()))
        costs = (f"{SHORT[n]} {1e3 * v[0] / max(v[2], 1):.1f}" for n, v in m.items())
        print(f"{label}: us a row " + ", ".join(costs))
        if not every_label[0]:
            break


async def run(args: argparse.Namespace, keep: Path) -> None:
    pg = EmbeddedPostgres(keep / "pg")
    url = pg.start()
    try:
        await migrate.upgrade_async(url, args.schema)
        engine = create_engine(url, pool_size=2)
        other = None
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
            params = (
                start_params(starts, now),
                reserve_many_params([s.reservation for s in starts]),
            )
            print(f"{len(starts)} placements, schema {args.schema}; load average {load()}")
            if args.released:
                await store_and_release(engine, params)
            await one_run(engine, [], params)  # thrown away: caches and pages cold
            if args.against:
                other = await second_database(url, args, params)
                await one_run(other, [], params)
                every_label[0] = True
                engines = {f"schema {args.against}": other, f"schema {args.schema}": engine}
                await compare(engines, {key: [] for key in engines}, params, args.reps)
                return
            chosen = {
                k: v
                for k, v in VARIANTS.items()
                if not args.variants or k == "as is" or k.startswith(tuple(args.variants))
            }
            await compare(dict.fromkeys(chosen, engine), chosen, params, args.reps)
        finally:
            await engine.dispose()
            if other is not None:
                await other.dispose()
    finally:
        pg.stop()
    print(f"load average after: {load()}")


async def store_and_release(engine: Any, params: Params) -> None:
    """The six writes committed, then undone as releases and a requeue would (the attempts
    deleted, their members and reservations cascading, the GPU masks cleared to 0 and kept;
    the counters back to 0; the jobs pending): the fleet of a leader that has been running,
    where the masks' rows exist and a store updates them."""
    async with engine.connect() as conn:
        tx = await conn.begin()
        for write, which in STATEMENTS.values():
            await conn.execute(write, params[which])
        await tx.commit()
        tx = await conn.begin()
        await conn.execute(text("DELETE FROM attempts"))
        await conn.execute(text("UPDATE nodes SET used_mcpu = 0, used_memory_mb = 0"))
        await conn.execute(text("UPDATE jobs SET state = 'pending' WHERE state = 'starting'"))
        await tx.commit()


async def second_database(url: str, args: argparse.Namespace, params: Params) -> Any:
    """A database ``against`` on the same server at revision ``--against``, the same rows."""
    admin = await asyncpg.connect(plain_url(url))
    try:
        await admin.execute("CREATE DATABASE against")
    finally:
        await admin.close()
    other_url = make_url(async_url(url)).set(database="against").render_as_string(False)
    await migrate.upgrade_async(other_url, args.against)
    other = create_engine(other_url, pool_size=2)
    await populate(lambda: PostgresUnitOfWork(other), args.nodes, workload(args.jobs, args.seed))
    if args.released:
        await store_and_release(other, params)
    return other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--schema", default="head")
    parser.add_argument("--against", help="A/B: the writes here and at this revision, in turn")
    parser.add_argument(
        "--released",
        action="store_true",
        help="first store and release once (committed): the GPU masks' rows exist, as on a "
        "fleet that had reservations",
    )
    parser.add_argument(
        "--variants", nargs="*", help="only the variants whose names start so (and 'as is')"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
