"""The rows a migration or constraint test of the reservation tables starts from, written with
raw SQL (no repository: the tests check what the schema itself allows): a node pool ``p`` of
8-GPU nodes, its nodes, and attempts each with its job and an open reservation; and two
connections for two concurrent transactions over them. Used by
tests/integration/test_migrations_0031.py, test_migrations_0032.py, test_migrations_0035.py,
test_reservation_constraints.py and test_statement_foreign_keys.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import asyncpg

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url

AT = datetime(2026, 12, 6, tzinfo=UTC)
NODES = ("n-0", "n-1")


async def migrated(url: str, revision: str) -> asyncpg.Connection:
    """A connection to the database ``url`` once it is migrated up to ``revision``."""
    await migrate.upgrade_async(url, revision)
    return await asyncpg.connect(plain_url(url))


async def make_nodes(
    conn: asyncpg.Connection, nodes: Iterable[str] = NODES, gpu_rows: bool = False
) -> None:
    """Pool ``p`` (8 GPUs, 4 CPUs, 8 GiB a node) and its ``nodes``, connected and schedulable.
    ``gpu_rows``: the schema before 0032, where a node's GPUs are rows of ``node_gpus``
    instead of its ``gpus`` count."""
    await conn.execute(
        "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, "
        "memory_mb_per_node) VALUES ('p', 'main', 'node', 8, 4000, 8192)"
    )
    for node in nodes:
        if gpu_rows:
            await conn.execute(
                "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb) "
                "VALUES ($1, 'p', 'schedulable', 'connected', 4000, 8192)",
                node,
            )
            await conn.execute(
                "INSERT INTO node_gpus (node, gpu_index) SELECT $1, i FROM generate_series(0, 7) i",
                node,
            )
        else:
            await conn.execute(
                "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, gpus) "
                "VALUES ($1, 'p', 'schedulable', 'connected', 4000, 8192, 8)",
                node,
            )


async def make_attempts(conn: asyncpg.Connection, attempts: Iterable[str]) -> None:
    """For each attempt id ``att-N``: job ``job-att-N`` starting, the attempt launching, and
    its reservation on queue ``default``."""
    for attempt in attempts:
        job = "job-" + attempt
        await conn.execute(
            "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at) "
            "VALUES ($1, $1, 'u', 'starting', '{}', $2, $2)",
            job,
            AT,
        )
        await conn.execute(
            "INSERT INTO attempts (id, job_id, number, state, created_at, updated_at) "
            "VALUES ($1, $2, 1, 'launching', $3, $3)",
            attempt,
            job,
            AT,
        )
        await reserve(conn, attempt)


async def reserve(conn: asyncpg.Connection, attempt: str) -> None:
    """Open the reservation of attempt ``attempt`` (of job ``job-<attempt>``)."""
    await conn.execute(
        "INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) "
        "VALUES ($1, $2, 'default', $3)",
        attempt,
        "job-" + attempt,
        AT,
    )


@asynccontextmanager
async def two_connections(url: str) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Connection]]:
    """Two connections to ``url`` (for two concurrent transactions), once pool ``p``, its nodes
    and attempts ``att-1`` and ``att-2`` with their reservations exist."""
    one = await asyncpg.connect(plain_url(url))
    two = await asyncpg.connect(plain_url(url))
    try:
        await make_nodes(one)
        await make_attempts(one, ("att-1", "att-2"))
        yield one, two
    finally:
        await one.close()
        await two.close()
