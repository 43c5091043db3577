"""The telemetry store's asyncpg pool (``create_pool``), apart from the store (``metrics.py``)
so that a process which only hands the pool over (the node gateway) does not import the
ingest's numpy."""

from __future__ import annotations

import asyncpg

from adapters.postgres.connect import KEEPALIVE_SECONDS, NO_JIT, keepalives, plain_url


class MetricsConnection(asyncpg.Connection):  # type: ignore[misc]
    """A metrics pool's connection: released without asyncpg's reset query.

    asyncpg ends every release with ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL``: a round trip and four statements, once per group commit of the telemetry
    gateway (at a thousand streams, groups of one or two batches, so per batch). Nothing on a
    metrics pool leaves session state behind: no ``SET``, no session advisory lock (the fold's
    and the compaction's are transaction-scoped), no ``LISTEN``, no cursor outside a
    transaction. asyncpg still rolls back a transaction left open at release (a test holds
    it)."""

    def get_reset_query(self) -> str:
        return ""


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 4, keepalive_seconds: float = KEEPALIVE_SECONDS
) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        plain_url(url),
        min_size=min_size,
        max_size=max_size,
        connection_class=MetricsConnection,
        server_settings={
            "application_name": "tuneplane-metrics",
            "plan_cache_mode": "force_custom_plan",
            **keepalives(keepalive_seconds),
            **NO_JIT,
        },
    )
    assert pool is not None
    return pool
