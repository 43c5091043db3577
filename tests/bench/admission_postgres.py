"""The PostgreSQL side of the admission benchmark (``bench_admission.py``): a private embedded
server migrated to a chosen revision, its processes' CPU, the store statements timed from the
client, ``auto_explain``, a webhook that wants every job, and a raw COPY baseline."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from domain.unit_of_work import UnitOfWorkFactory
from tests.bench.pg_probe import Probe, cpu_by_kind, describe_tables

PG_PIDFILE: list[Path] = []
PROBE: list[Probe] = []  # pg_stat_wal and the tables' counters, on a connection of its own


def server_cpu_kinds() -> dict[str, float]:
    """CPU seconds so far of the PostgreSQL server's processes, by kind (backends, autovacuum,
    walwriter, ...: pg_probe.cpu_by_kind; the probe's own backend left out); empty without
    one."""
    if not PG_PIDFILE:
        return {}
    return cpu_by_kind(PG_PIDFILE[0], frozenset(p.pid for p in PROBE))


def server_cpu() -> float:
    """CPU seconds (user + system) of the PostgreSQL server's processes so far (Linux /proc);
    0 without one."""
    return sum(server_cpu_kinds().values())


async def wal_mark() -> str:
    """Where the WAL is now (an LSN); empty without a server."""
    return await PROBE[0].lsn() if PROBE else ""


async def wal_since(mark: str) -> dict[str, float]:
    """The WAL written since ``mark``: records, full-page image bytes, bytes."""
    return await PROBE[0].wal(mark) if PROBE else {}


# what a server that has been running a while has done before the running leader's fill pass
# (bench_admission --running-prep): autovacuum's work on the jobs written since (the benchmark
# runs it, as autovacuum would within a minute or so), and a checkpoint since the store's pages
# were last written (so the pass pays the full-page images a running server pays)
RUNNING_PREP = ["VACUUM ANALYZE", "CHECKPOINT"]


async def pending_again(job_ids: list[str], prep: list[str]) -> None:
    """Not timed: the jobs a pass placed (their reservations released) are pending again, so
    the next pass makes the same placements; then ``prep`` (SQL, on the probe's connection)."""
    conn = PROBE[0].conn
    await conn.execute("UPDATE jobs SET state = 'pending' WHERE id = ANY($1::text[])", job_ids)
    for statement in filter(None, prep):
        await conn.execute(statement)


def store_detail(
    cpu: dict[str, float], wal: dict[str, float], calls: dict[str, int], tables: str
) -> str:
    """A pass's store on the server: its CPU by process kind, the WAL it wrote, how many
    times each store statement ran, and the store tables' maintenance so far."""
    if not wal:
        return ""
    kinds = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    runs = ", ".join(f"{k} x{v}" for k, v in sorted(calls.items()))
    return (f"PostgreSQL's CPU in the store by process, ms: {kinds}; WAL in the pass: "
            f"{wal['wal_records']:.0f} records, {wal['wal_bytes'] / 2**20:.1f} MiB of which "
            f"full-page images {wal['fpi_bytes'] / 2**20:.1f} MiB; store "
            f"statements: {runs}\n  tables after it: {tables}")  # fmt: skip


async def tables_now() -> str:
    """Whether each store table was analyzed and vacuumed yet (autovacuum included)."""
    return describe_tables(await PROBE[0].tables()) if PROBE else ""


@contextlib.asynccontextmanager
async def postgres(
    keep: Path, explain: Path | None = None, webhook: bool = False, schema: str = "head"
) -> AsyncIterator[tuple[UnitOfWorkFactory, str]]:
    from adapters.postgres import migrate
    from adapters.postgres.embedded import EmbeddedPostgres
    from adapters.postgres.engine import create_engine
    from adapters.postgres.uow import PostgresUnitOfWork

    # --explain needs a PostgreSQL with contrib's auto_explain: TUNEPLANE_PG_BIN names one
    pg_bin = os.environ.get("TUNEPLANE_PG_BIN")
    pg = EmbeddedPostgres(keep / "pg", bin_dir=Path(pg_bin) if pg_bin else None)
    url = pg.start()
    PG_PIDFILE[:] = [pg.pgdata / "postmaster.pid"]
    try:
        await migrate.upgrade_async(url, schema)
        if explain is not None:
            await auto_explain(url)
        if webhook:
            await subscribe_every_job(url)
        engine = create_engine(url, pool_size=4)
        time_statements(engine.sync_engine)
        dsn = url.replace("postgresql+asyncpg://", "postgresql://")
        PROBE[:] = [await Probe.open(dsn, pg.pgdata, pg._bin)]
        try:
            yield (lambda: PostgresUnitOfWork(engine)), url
        finally:
            await PROBE.pop().close()
            await engine.dispose()
    finally:
        pg.stop()
        if explain is not None:
            shutil.copyfile(keep / "pg" / "server.log", explain)


# seconds per statement of the store, since the last clear (time_statements)
STATEMENTS: dict[str, float] = {}
CALLS: dict[str, int] = {}  # how many times each ran, since the last clear
_STORE_STATEMENTS = {"WITH moved AS": "the jobs statement", "WITH d AS": "the reserve statement"}


def time_statements(engine: Any) -> None:
    """Each store statement timed from the client (no EXPLAIN, whose per-row timing inflates
    per-row triggers): SQLAlchemy's cursor events, summed into ``STATEMENTS``."""
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["tp_t"] = time.perf_counter()

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        for head, name in _STORE_STATEMENTS.items():
            if statement.startswith(head):
                spent = time.perf_counter() - conn.info.pop("tp_t", time.perf_counter())
                STATEMENTS[name] = STATEMENTS.get(name, 0.0) + spent
                CALLS[name] = CALLS.get(name, 0) + 1


async def auto_explain(url: str) -> None:
    """Every statement of 50 ms or more is logged with its plan, its buffers and its
    triggers' times (``EXPLAIN (ANALYZE, BUFFERS)``) in the server log: ``--explain``."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("LOAD 'auto_explain'")  # so that ALTER SYSTEM knows its settings
        for name, value in [
            ("session_preload_libraries", "auto_explain"),
            ("auto_explain.log_min_duration", "50ms"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_buffers", "on"),
            ("auto_explain.log_triggers", "on"),
            ("auto_explain.log_nested_statements", "on"),
        ]:
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def subscribe_every_job(url: str) -> None:
    """One webhook that wants every change of every job (its owner's, any state): each
    timeline event of the pass then writes an outbox row (``--webhook``)."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(
            "INSERT INTO webhook_subscriptions (id, owner, scope, target, url, format, "
            "created_at, secret) VALUES ('wh-bench', 'bench', 'user', 'bench', "
            "'https://receiver.example', 'tuneplane', now(), 'k')"
        )
    finally:
        await conn.close()


async def copy_baseline(url: str, rows: int) -> float:
    """Seconds for a raw asyncpg COPY of ``rows`` (node, gpu, attempt) rows into a temp table."""
    import asyncpg

    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TEMP TABLE g (node text, gpu int, attempt text)")
        data = [(f"a-{i // 8:04d}", i % 8, f"att-{i:08d}") for i in range(rows)]
        t = time.perf_counter()
        await conn.copy_records_to_table("g", records=data)
        return time.perf_counter() - t
    finally:
        await conn.close()
