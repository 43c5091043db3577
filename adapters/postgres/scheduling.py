"""The scheduler's snapshot in four queries: pools, nodes with their free capacity, queues with
their usage, and the first pending jobs in queue order.

Pending jobs are read without their whole spec: only ``spec->'roles'`` as JSON text, decoded
once per distinct text (most jobs ask for one of a few shapes), so 10,000 pending jobs cost
little more than the rows themselves.

Names and ids sort by code point (``COLLATE "C"``), as Python and the in-memory adapters sort
them, whatever the database's locale.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.arrays import int_array, literal_params, text_array, time_array
from adapters.postgres.errors import translated
from adapters.postgres.reservations import PostgresReservationRepository, reserve_many_params
from domain.admission import (
    NodeView,
    PendingChanges,
    PendingJob,
    QueueView,
    Reservation,
    Snapshot,
)
from domain.errors import InvalidInput
from domain.fleet import Connectivity, Node, Queue, SchedState, Validation
from domain.lifecycle import JobState
from domain.ports import Start
from domain.requests import RoleSpec
from domain.submission import JobSpec

_ANY_TIME = datetime(9999, 1, 1, tzinfo=UTC)  # no time given: every pending job
# One statement for the jobs, their attempts and members, whatever the number of placements:
# the rows travel as array literals (arrays.py); only the jobs still pending move, and only
# theirs are inserted. The state test is written ``(state = 'pending') IS TRUE`` (the same
# rows: ``state`` is never NULL) so that it is no index condition: the jobs are then found by
# their primary key, one probe an id, whatever the statistics say. As ``state = 'pending'``,
# on a table never analyzed, or vacuumed but not yet analyzed, or whose statistics find
# pending jobs rare, the planner chose a state index and, in the worst case, scanned all its
# pending entries once for each id: about 940 ms instead of 2 ms for 1,277 ids at 10,000
# pending jobs (docs/benchmarks.md, "Session 45"). It sets ``changed`` itself (the
# transaction's id, as the ``jobs_changed`` trigger would): the trigger is then not called for
# its rows (migration 0040).
_START = text(
    literal_params(
        "WITH moved AS (UPDATE jobs SET state = 'starting', updated_at = :now, reason = '', "
        "               not_before = NULL, changed = (pg_current_xact_id())::text::bigint "
        "               WHERE id = ANY(CAST(:ids AS text[])) AND (state = 'pending') IS TRUE "
        "               RETURNING id), "
        "a AS (INSERT INTO attempts (id, job_id, number, state, created_at, updated_at, reason, "
        "                            exit_code, cause) "
        "      SELECT x.* FROM unnest(CAST(:a_id AS text[]), CAST(:a_job AS text[]), "
        "             CAST(:a_number AS int[]), CAST(:a_state AS text[]), "
        "             CAST(:a_created AS timestamptz[]), CAST(:a_updated AS timestamptz[]), "
        "             CAST(:a_reason AS text[]), CAST(:a_exit AS int[]), CAST(:a_cause AS text[])) "
        "             AS x(id, job_id, number, state, created_at, updated_at, reason, exit_code, "
        "                  cause) "
        "      WHERE x.job_id IN (SELECT id FROM moved) RETURNING id), "
        "m AS (INSERT INTO members (id, attempt_id, index, state, handle, exit_code, reason, "
        "                           updated_at, node, role) "
        "      SELECT y.* FROM unnest(CAST(:m_id AS text[]), CAST(:m_attempt AS text[]), "
        "             CAST(:m_index AS int[]), CAST(:m_state AS text[]), "
        "             CAST(:m_handle AS text[]), "
        "             CAST(:m_exit AS int[]), CAST(:m_reason AS text[]), "
        "             CAST(:m_updated AS timestamptz[]), CAST(:m_node AS text[]), "
        "             CAST(:m_role AS text[])) "
        "             AS y(id, attempt_id, index, state, handle, exit_code, reason, updated_at, "
        "                  node, role) "
        "      WHERE y.attempt_id IN (SELECT id FROM a)) "
        "SELECT id FROM moved"
    )
)
# The read's plans do not depend on statistics: every table it probes per row has an index
# for that probe (a node's reservation members, a reservation's members, a job's attempts),
# and with sequential scans off the planner takes it. Why: each statement is prepared once a
# connection, and one without parameters keeps its plan until the tables' statistics change;
# a plan made while the reservation tables were empty (vacuumed to no pages at all when the
# fleet was idle) scanned every member for each of 8,000 GPUs: 700 ms instead of 10 ms
# (docs/benchmarks.md, "Session 45"). No JIT either: a misestimated cost made a packaged
# server (built with LLVM) compile a read for 150 ms. ``set_config(…, true)``: this
# transaction only.
_READ_SETTINGS = text(
    "SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"
)
_POOLS = text('SELECT * FROM pools ORDER BY name COLLATE "C"')
_NODES = text(
    "SELECT n.name, n.pool, n.sched, n.connectivity, n.validation, "
    "n.mcpu - n.used_mcpu AS free_mcpu, n.memory_mb - n.used_memory_mb AS free_memory_mb, "
    # its GPUs 0 … gpus-1 less those its reservation members hold (numbers slot * 64 + i)
    "ARRAY(SELECT i FROM generate_series(0, n.gpus - 1) AS i WHERE NOT EXISTS "
    "        (SELECT 1 FROM reservation_members r "
    "         WHERE r.node = n.name AND r.gpus @> n.slot * 64 + i) "
    "      ORDER BY i) AS free_gpus "
    'FROM nodes n ORDER BY n.name COLLATE "C"'
)
# Each queue's reserved jobs and GPUs: a reservation's GPUs are summed over its members by a
# probe of their primary key (``attempt_id`` first), whatever the statistics say. A join of
# the two tables, planned on statistics taken while they were empty (autovacuum's ANALYZE of
# an idle fleet), became a nested loop that scanned every member for each reservation: about
# 550 ms instead of 5 ms at 1,300 reservations (docs/benchmarks.md, "Session 45").
_QUEUES = text(
    "SELECT q.name, q.team, q.priority, q.gpu_quota, q.job_quota, q.max_attempts, "
    "coalesce(u.gpus, 0) AS gpus, coalesce(u.jobs, 0) AS jobs "
    "FROM queues q LEFT JOIN ("
    "  SELECT r.queue, count(*) AS jobs, "
    "  CAST(coalesce(sum((SELECT sum(upper(x) - lower(x)) "
    "                     FROM reservation_members m CROSS JOIN LATERAL unnest(m.gpus) AS x "
    "                     WHERE m.attempt_id = r.attempt_id)), 0) AS bigint) AS gpus "
    "  FROM reservations r GROUP BY r.queue) u ON u.queue = q.name"
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

# The jobs changed since a mark (or every pending job), and the next mark: the oldest
# transaction still running when this statement's snapshot was taken (every one below it had
# ended, so what it wrote is visible here). Migration 0031 keeps ``jobs.changed``.
_CHANGES = (
    "SELECT m.mark, j.* FROM "
    "(SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint) AS mark) m "
    "LEFT JOIN LATERAL ("
    "  SELECT j.id, j.state = :pending AS pending, j.queue, j.created_at, j.not_before, "
    "  CASE WHEN j.state = :pending THEN CAST(j.spec->'roles' AS text) END AS roles, "
    "  CASE WHEN j.state = :pending AND j.spec->'roles' IS NULL THEN CAST(j.spec AS text) END "
    "       AS legacy, "
    "  CASE WHEN j.state = :pending THEN "
    "       (SELECT count(*) FROM attempts a WHERE a.job_id = j.id) END AS attempts "
    "  FROM jobs j WHERE {where}) j ON true"
)
_ALL_PENDING = text(_CHANGES.format(where="j.state = :pending"))
_CHANGED_SINCE = text(_CHANGES.format(where="j.changed >= :since"))


@functools.lru_cache(maxsize=1024)
def _roles(roles_json: str) -> tuple[RoleSpec, ...]:
    return tuple(RoleSpec.from_dict(r) for r in json.loads(roles_json))


def start_params(starts: Sequence[Start], now: datetime) -> dict[str, Any]:
    """``_START``'s parameters: every attempt's and member's columns as array literals
    (arrays.py: one text each, not a list asyncpg encodes element by element)."""
    atts = [s.attempt for s in starts]
    mems = [m for s in starts for m in s.members]
    return {
        "now": now,
        "ids": text_array([s.job_id for s in starts]),
        "a_id": text_array([a.id for a in atts]),
        "a_job": text_array([a.job_id for a in atts]),
        "a_number": int_array([a.number for a in atts]),
        "a_state": text_array([a.state.value for a in atts]),
        "a_created": time_array([a.created_at for a in atts]),
        "a_updated": time_array([a.updated_at for a in atts]),
        "a_reason": text_array([a.reason for a in atts]),
        "a_exit": int_array([a.exit_code for a in atts]),
        "a_cause": text_array([a.cause for a in atts]),
        "m_id": text_array([m.id for m in mems]),
        "m_attempt": text_array([m.attempt_id for m in mems]),
        "m_index": int_array([m.index for m in mems]),
        "m_state": text_array([m.state.value for m in mems]),
        "m_handle": text_array([m.handle for m in mems]),
        "m_exit": int_array([m.exit_code for m in mems]),
        "m_reason": text_array([m.reason for m in mems]),
        "m_updated": time_array([m.updated_at for m in mems]),
        "m_node": text_array([m.node for m in mems]),
        "m_role": text_array([m.role for m in mems]),
    }


def _encoded(batch: Sequence[Reservation]) -> dict[str, Any] | None:
    """``reserve_many_params(batch)``, or None where it refuses the batch (``reserve_many``
    then raises the refusal with its message)."""
    try:
        return reserve_many_params(batch)
    except Exception:  # the same call in reserve_many raises it properly
        return None


@functools.cache
def _why_not(sched: str, connectivity: str, validation: str) -> str:
    """``Node.why_not`` of a node in these states: a few combinations for a whole fleet, so
    worked out once each (a thousand nodes a pass)."""
    states = (SchedState(sched), Connectivity(connectivity), Validation(validation))
    return Node("", "", *states).why_not


class PostgresSchedulingRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def snapshot(self, limit: int, now: datetime | None = None) -> Snapshot:
        if limit < 0:
            raise InvalidInput(f"limit {limit} is negative", fix="give 0 or more", field="limit")
        conn = self._conn
        with translated("read the scheduling snapshot"):
            await conn.execute(_READ_SETTINGS)
            pool_rows = (await conn.execute(_POOLS)).mappings().all()
            node_rows = (await conn.execute(_NODES)).all()
            queue_rows = (await conn.execute(_QUEUES)).all()
            job_rows = (
                (
                    await conn.execute(
                        _PENDING,
                        {
                            "pending": JobState.PENDING.value,
                            "limit": limit,
                            "now": now or _ANY_TIME,
                        },
                    )
                ).all()
                if limit
                else []
            )
        pools = {r["name"]: codec.pool_from_row(r) for r in pool_rows}
        nodes = [  # unpacked by position (a thousand rows a pass): _NODES' column order
            NodeView(name, pool, tuple(free), mcpu, memory, _why_not(sched, link, validation))
            for name, pool, sched, link, validation, mcpu, memory, free in node_rows
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

    async def pending_changes(self, since: int | None) -> PendingChanges:
        pending = JobState.PENDING.value
        with translated("read the pending jobs' changes"):
            await self._conn.execute(_READ_SETTINGS)
            if since is None:
                rows = (await self._conn.execute(_ALL_PENDING, {"pending": pending})).all()
            else:
                params = {"pending": pending, "since": since}
                rows = (await self._conn.execute(_CHANGED_SINCE, params)).all()
        jobs = [
            PendingJob(
                r.id,
                r.queue,
                r.created_at,
                _roles(r.roles)
                if r.roles is not None
                else JobSpec.from_dict(json.loads(r.legacy)).roles,
                r.attempts,
                r.not_before,
            )
            for r in rows
            if r.pending
        ]
        gone = tuple(r.id for r in rows if r.id is not None and not r.pending)
        return PendingChanges(rows[0].mark, since is None, tuple(jobs), gone)

    async def start(self, starts: Sequence[Start], now: datetime) -> list[str]:
        """Two round trips whatever the batch: one statement moves the jobs still pending and
        inserts their attempts and members, one reserves every envelope (reservations.py)."""
        conn = self._conn
        if not starts:
            return []
        reservations = [s.reservation for s in starts]
        params = start_params(starts, now)
        # the reserve statement's parameters are encoded in a thread while the server runs the
        # jobs statement (docs/scheduling.md). The statement is sent from this task, before it
        # yields: another task (the pass's decide) must not run first and delay the send.
        encoding = asyncio.get_running_loop().run_in_executor(None, _encoded, reservations)
        with translated("start the placed jobs"):
            result = await conn.execute(_START, params)
        encoded = await encoding  # never raises: _encoded says None instead
        moved = set(result.scalars())
        chosen = [s for s in starts if s.job_id in moved]
        repository = PostgresReservationRepository(conn)
        if len(chosen) == len(starts) and encoded is not None:
            await repository.reserve_encoded(reservations, encoded)
        elif chosen:  # some lost a race (or the batch is refused: reserve_many says why)
            await repository.reserve_many([s.reservation for s in chosen])
        return [s.job_id for s in chosen]
