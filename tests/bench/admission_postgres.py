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

PG_PIDFILE: list[Path] = []


def server_cpu() -> float:
    """CPU seconds (user + system) of the PostgreSQL server's processes so far (Linux /proc);
    0 without one."""
    if not PG_PIDFILE:
        return 0.0
    postmaster = PG_PIDFILE[0].read_text().split()[0]
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if fields[1] == postmaster or stat.parent.name == postmaster:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


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
        try:
            yield (lambda: PostgresUnitOfWork(engine)), url
        finally:
            await engine.dispose()
    finally:
        pg.stop()
        if explain is not None:
            shutil.copyfile(keep / "pg" / "server.log", explain)


# seconds per statement of the store, since the last clear (time_statements)
STATEMENTS: dict[str, float] = {}
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
