"""The jobs list's text search (``GET /v1/jobs?q=``) on 100,000 jobs (not part of the suite).

``BENCH_JOBS`` jobs (100,000; 50 owners, experiments ``exp-<n>``) are written in one statement;
then the repository's own list query (captured as it is sent) is run under ``EXPLAIN (ANALYZE,
BUFFERS)``: no search (the baseline), a search matching about one job in 900, one matching
every job, and one matching none (the worst case: every row is read), each also with
``owner=``. The report gives each plan's node, the server's execution time and its ratio to the
baseline, measured in one run.

Run: ``.venv/bin/pytest tests/bench/bench_job_search.py -m bench -s``
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import codec
from adapters.postgres.uow import PostgresUnitOfWork
from tests.contract.builders import a_job

pytestmark = pytest.mark.bench

JOBS = int(os.environ.get("BENCH_JOBS", "100000"))
FILL = text(
    "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
    "SELECT 'job-' || lpad(to_hex(i), 8, '0'), 'pre-' || i, 'user' || (i % 50), "
    "CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'succeeded' END, "
    "jsonb_set(CAST(:spec AS jsonb), '{experiment}', to_jsonb('exp-' || i)), "
    "now() - make_interval(secs => :n - i), now() - make_interval(secs => :n - i), 'default' "
    "FROM generate_series(1, :n) AS i"
)


async def test_search_plans(pg_engine: AsyncEngine) -> None:
    spec = json.dumps(codec.job_values(a_job())["spec"])
    async with pg_engine.begin() as conn:
        await conn.execute(FILL, {"spec": spec, "n": JOBS})
        await conn.execute(text("ANALYZE jobs"))

    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            sent.append((statement, params))

    event.listen(pg_engine.sync_engine, "before_cursor_execute", capture)
    cases = {
        "no search": None,
        "about 1 in 900 (exp-1234: 111 jobs)": "exp-1234",
        "every job (exp-)": "exp-",
        "none (nothing-like-it)": "nothing-like-it",
    }
    results: dict[str, float] = {}
    for owner in (None, "user7"):
        for name, q in cases.items():
            sent.clear()
            async with PostgresUnitOfWork(pg_engine) as uow:
                await uow.jobs.list(owner=owner, states=None, limit=51, cursor=None, search=q)
            statement, params = sent[-1]
            async with pg_engine.connect() as conn:
                raw = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + statement, params
                )
                plan = [r[0] for r in raw]
            took = float(re.search(r"Execution Time: ([\d.]+) ms", plan[-1]).group(1))  # type: ignore[union-attr]
            key = f"owner={owner or '-'}, {name}"
            results[key] = took
            print(f"\n{key}: {took:.2f} ms\n  " + "\n  ".join(plan[:6]))
    event.remove(pg_engine.sync_engine, "before_cursor_execute", capture)
    for owner in ("-", "user7"):
        base = results[f"owner={owner}, no search"]
        for name in cases:
            key = f"owner={owner}, {name}"
            print(f"{key}: {results[key]:.2f} ms = {results[key] / base:.1f}x the baseline")
