"""The scheduler's snapshot in four queries: pools, nodes with their free capacity, queues with
their usage, and the first pending jobs in queue order.

Pending jobs are read without their whole spec: only ``spec->'roles'`` as JSON text, decoded
once per distinct text (most jobs ask for one of a few shapes), so 10,000 pending jobs cost
little more than the rows themselves.

Names and ids sort by code point (``COLLATE "C"``), as Python and the in-memory adapters sort
them, whatever the database's locale.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.reservations import PostgresReservationRepository
from adapters.postgres.tables import attempts, members
from domain.admission import NodeView, PendingJob, QueueView, Snapshot
from domain.errors import InvalidInput
from domain.fleet import Connectivity, Node, Queue, SchedState, Validation
from domain.lifecycle import JobState
from domain.ports import Start
from domain.requests import RoleSpec
from domain.submission import JobSpec

_ANY_TIME = datetime(9999, 1, 1, tzinfo=UTC)  # no time given: every pending job
_START = text(
    "UPDATE jobs SET state = 'starting', updated_at = :now, reason = '', not_before = NULL "
    "WHERE id = ANY(CAST(:ids AS text[])) AND state = 'pending' RETURNING id"
)
_POOLS = text('SELECT * FROM pools ORDER BY name COLLATE "C"')
_NODES = text(
    "SELECT n.name, n.pool, n.sched, n.connectivity, n.validation, "
    "n.mcpu - n.used_mcpu AS free_mcpu, n.memory_mb - n.used_memory_mb AS free_memory_mb, "
    "ARRAY(SELECT g.gpu_index FROM node_gpus g WHERE g.node = n.name AND NOT EXISTS "
    "        (SELECT 1 FROM reserved_gpus r WHERE r.node = g.node AND r.gpu_index = g.gpu_index)"
    "      ORDER BY g.gpu_index) AS free_gpus "
    'FROM nodes n ORDER BY n.name COLLATE "C"'
)
_QUEUES = text(
    "SELECT q.name, q.team, q.priority, q.gpu_quota, q.job_quota, q.max_attempts, "
    "coalesce(u.gpus, 0) AS gpus, coalesce(u.jobs, 0) AS jobs "
    "FROM queues q LEFT JOIN ("
    "  SELECT r.queue, count(DISTINCT r.attempt_id) AS jobs, count(g.gpu_index) AS gpus "
    "  FROM reservations r LEFT JOIN reserved_gpus g ON g.attempt_id = r.attempt_id "
    "  GROUP BY r.queue) u ON u.queue = q.name"
)
# a job whose queue is gone sorts as priority 0 (decide() then explains why it waits)
_PENDING = text(
    "SELECT j.id, j.queue, j.created_at, CAST(j.spec->'roles' AS text) AS roles, "
    "(SELECT count(*) FROM attempts a WHERE a.job_id = j.id) AS attempts, "
    "CASE WHEN j.spec->'roles' IS NULL THEN CAST(j.spec AS text) END AS legacy "
    "FROM jobs j LEFT JOIN queues q ON q.name = j.queue "
    "WHERE j.state = :pending AND (j.not_before IS NULL OR j.not_before <= :now) "
    'ORDER BY coalesce(q.priority, 0) DESC, j.created_at, j.id COLLATE "C" '
    "LIMIT :limit"
)


@functools.lru_cache(maxsize=1024)
def _roles(roles_json: str) -> tuple[RoleSpec, ...]:
    return tuple(RoleSpec.from_dict(r) for r in json.loads(roles_json))


class PostgresSchedulingRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def snapshot(self, limit: int, now: datetime | None = None) -> Snapshot:
        if limit < 0:
            raise InvalidInput(f"limit {limit} is negative", fix="give 0 or more", field="limit")
        conn = self._conn
        with translated("read the scheduling snapshot"):
            pool_rows = (await conn.execute(_POOLS)).mappings().all()
            node_rows = (await conn.execute(_NODES)).all()
            queue_rows = (await conn.execute(_QUEUES)).all()
            job_rows = (
                await conn.execute(
                    _PENDING,
                    {"pending": JobState.PENDING.value, "limit": limit, "now": now or _ANY_TIME},
                )
            ).all()
        pools = {r["name"]: codec.pool_from_row(r) for r in pool_rows}
        nodes = [
            NodeView(
                name=r.name,
                pool=r.pool,
                free_gpus=tuple(r.free_gpus),
                free_mcpu=r.free_mcpu,
                free_memory_mb=r.free_memory_mb,
                why_not=Node(
                    r.name,
                    r.pool,
                    SchedState(r.sched),
                    Connectivity(r.connectivity),
                    Validation(r.validation),
                ).why_not,
            )
            for r in node_rows
        ]
        queues = {
            r.name: QueueView(
                Queue(r.name, r.team, r.priority, r.gpu_quota, r.job_quota, r.max_attempts),
                r.gpus,
                r.jobs,
            )
            for r in queue_rows
        }
        pending = [
            PendingJob(
                r.id,
                r.queue,
                r.created_at,
                _roles(r.roles)
                if r.roles is not None
                else JobSpec.from_dict(json.loads(r.legacy)).roles,
                r.attempts,
            )
            for r in job_rows
        ]
        return Snapshot(pools, nodes, queues, pending)

    async def start(self, starts: Sequence[Start], now: datetime) -> list[str]:
        """Four round trips whatever the batch: one UPDATE for the jobs, one multi-row INSERT
        each for attempts and members, one statement for every reservation (reservations.py)."""
        conn = self._conn
        if not starts:
            return []
        with translated("start the placed jobs"):
            moved = set(
                (
                    await conn.execute(_START, {"ids": [s.job_id for s in starts], "now": now})
                ).scalars()
            )
            chosen = [s for s in starts if s.job_id in moved]
            if not chosen:
                return []
            await conn.execute(insert(attempts), [codec.attempt_values(s.attempt) for s in chosen])
            await conn.execute(
                insert(members), [codec.member_values(m) for s in chosen for m in s.members]
            )
        await PostgresReservationRepository(conn).reserve_many([s.reservation for s in chosen])
        return [s.job_id for s in chosen]
