"""Direct SQL checks for tests: what is really in the database, bypassing the API."""

from __future__ import annotations

import asyncpg


def plain_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def count_rows(url: str, table: str, where: str = "true", *args: object) -> int:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table} WHERE {where}", *args))
    finally:
        await conn.close()


async def table_counts(url: str) -> dict[str, int]:
    tables = ["previews", "submissions", "jobs", "attempts", "members"]
    return {t: await count_rows(url, t) for t in tables}
