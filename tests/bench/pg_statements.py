"""pg_stat_statements for the benchmarks: reset it, or print the costliest statements."""

from __future__ import annotations

import asyncpg

from tests.support.db import plain_dsn


async def statements(url: str, reset: bool) -> None:
    """pg_stat_statements: reset, or print the costliest statements (plan + execution)."""
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if reset:
            await conn.execute("SELECT pg_stat_statements_reset()")
            return
        rows = await conn.fetch(
            "SELECT calls, rows, total_plan_time + total_exec_time AS ms, total_plan_time,"
            " left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS q FROM pg_stat_statements"
            " ORDER BY 3 DESC LIMIT 14"
        )
        print("\n  PostgreSQL statements (ms total, of it planning; calls; rows):")
        for r in rows:
            print(f"    {r['ms']:9.0f} {r['total_plan_time']:7.0f} {r['calls']:7} {r['rows']:9}"
                  f"  {r['q']}")  # fmt: skip
    finally:
        await conn.close()
