"""Launch reservations: the whole envelope of an attempt, refused by the database itself when
it would double-book anything.

* ``reserved_gpus`` has one row per reserved GPU, keyed by (node, gpu_index): a second
  reservation of a GPU is a unique violation, and a GPU the node does not have is a foreign-key
  violation (``node_gpus``).
* ``nodes.used_mcpu`` / ``used_memory_mb`` are counters the reservations add to and release
  takes from, under ``CHECK (used_… BETWEEN 0 AND capacity)``: an over-committed node is a
  check violation.

Each of ``reserve`` and ``release`` is one statement (one round trip, a prepared statement
whatever the envelope's size: the rows travel as arrays). ``reserve`` first updates the
counters, which takes the row lock of every node it touches, then inserts its rows; so two
transactions reserving on one node queue on that lock, and the later one sees the earlier
one's GPUs once it gets it (a unique violation at once, never a wait on the GPU's key).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from domain.admission import Assignment, Reservation
from domain.errors import Conflict

_RESERVE = text(
    "WITH d AS (SELECT * FROM unnest(CAST(:d_node AS text[]), CAST(:d_mcpu AS int[]), "
    "                                CAST(:d_memory AS int[])) AS d(node, mcpu, memory_mb)), "
    "upd AS (UPDATE nodes n SET used_mcpu = n.used_mcpu + d.mcpu, "
    "               used_memory_mb = n.used_memory_mb + d.memory_mb "
    "        FROM d WHERE n.name = d.node RETURNING n.name), "
    # every insert below reads `locked`: the counters (and the node locks) come first
    "locked AS (SELECT count(*) AS nodes FROM upd), "
    "r AS (INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) "
    "      SELECT :attempt_id, :job_id, :queue, :reserved_at FROM locked), "
    "m AS (INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb) "
    "      SELECT :attempt_id, x.* FROM locked CROSS JOIN unnest(CAST(:m_member AS int[]), "
    "             CAST(:m_role AS text[]), CAST(:m_node AS text[]), CAST(:m_mcpu AS int[]), "
    "             CAST(:m_memory AS int[])) AS x(member, role, node, mcpu, memory_mb)), "
    "g AS (INSERT INTO reserved_gpus (node, gpu_index, attempt_id, member) "
    "      SELECT y.node, y.gpu_index, :attempt_id, y.member FROM locked CROSS JOIN "
    "             unnest(CAST(:g_node AS text[]), CAST(:g_index AS int[]), "
    "                    CAST(:g_member AS int[])) AS y(node, gpu_index, member)) "
    "SELECT nodes FROM locked"
)

# The same for a batch of attempts: one statement whatever the batch (the scheduler's path).
_RESERVE_MANY = text(
    "WITH d AS (SELECT * FROM unnest(CAST(:d_node AS text[]), CAST(:d_mcpu AS int[]), "
    "                                CAST(:d_memory AS int[])) AS d(node, mcpu, memory_mb)), "
    "upd AS (UPDATE nodes n SET used_mcpu = n.used_mcpu + d.mcpu, "
    "               used_memory_mb = n.used_memory_mb + d.memory_mb "
    "        FROM d WHERE n.name = d.node RETURNING n.name), "
    "locked AS (SELECT count(*) AS nodes FROM upd), "
    "r AS (INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) "
    "      SELECT x.* FROM locked CROSS JOIN unnest(CAST(:r_attempt AS text[]), "
    "             CAST(:r_job AS text[]), CAST(:r_queue AS text[]), "
    "             CAST(:r_at AS timestamptz[])) AS x(attempt_id, job_id, queue, reserved_at)), "
    "m AS (INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb) "
    "      SELECT x.* FROM locked CROSS JOIN unnest(CAST(:m_attempt AS text[]), "
    "             CAST(:m_member AS int[]), CAST(:m_role AS text[]), CAST(:m_node AS text[]), "
    "             CAST(:m_mcpu AS int[]), CAST(:m_memory AS int[])) "
    "             AS x(attempt_id, member, role, node, mcpu, memory_mb)), "
    "g AS (INSERT INTO reserved_gpus (node, gpu_index, attempt_id, member) "
    "      SELECT y.* FROM locked CROSS JOIN unnest(CAST(:g_node AS text[]), "
    "             CAST(:g_index AS int[]), CAST(:g_attempt AS text[]), CAST(:g_member AS int[])) "
    "             AS y(node, gpu_index, attempt_id, member)) "
    "SELECT nodes FROM locked"
)

# The members are read from the statement's snapshot, before the cascade deletes them; a
# concurrent release of the same attempt waits for the row lock, then deletes nothing.
_RELEASE = text(
    "WITH r AS (DELETE FROM reservations WHERE attempt_id = :attempt_id RETURNING attempt_id), "
    "m AS (SELECT rm.node, sum(rm.mcpu) AS mcpu, sum(rm.memory_mb) AS memory_mb "
    "      FROM reservation_members rm JOIN r ON r.attempt_id = rm.attempt_id "
    "      GROUP BY rm.node), "
    "upd AS (UPDATE nodes n SET used_mcpu = n.used_mcpu - m.mcpu, "
    "               used_memory_mb = n.used_memory_mb - m.memory_mb "
    "        FROM m WHERE n.name = m.node) "
    "SELECT count(*) FROM r"
)

_READ = (
    "SELECT r.attempt_id, r.job_id, r.queue, r.reserved_at, "
    "rm.member, rm.role, rm.node, rm.mcpu, rm.memory_mb, "
    "ARRAY(SELECT g.gpu_index FROM reserved_gpus g "
    "      WHERE g.attempt_id = rm.attempt_id AND g.member = rm.member "
    "      ORDER BY g.gpu_index) AS gpus "
    "FROM reservations r LEFT JOIN reservation_members rm ON rm.attempt_id = r.attempt_id "
)
_GET = text(_READ + "WHERE r.attempt_id = :attempt_id ORDER BY rm.member")
_LIVE = text(_READ + 'ORDER BY r.attempt_id COLLATE "C", rm.member')

# what each refusal means (SQLSTATE → reason)
REFUSALS = {
    "23505": "a GPU is already reserved, or the attempt already holds a reservation",
    "23514": "a node would exceed its CPUs or memory",
    "23503": "a node, GPU index or the attempt does not exist",
    "40P01": "it lost a race with a concurrent transaction (deadlock)",
    "40001": "it lost a race with a concurrent transaction (serialization)",
}


def reserve_params(reservation: Reservation) -> dict[str, Any]:
    """The statement's parameters: the rows of each table as arrays."""
    demand: dict[str, list[int]] = {}
    for a in reservation.assignments:
        d = demand.setdefault(a.node, [0, 0])
        d[0] += a.mcpu
        d[1] += a.memory_mb
    nodes = sorted(demand)  # row locks in name order
    members = sorted(reservation.assignments, key=lambda a: a.member)
    gpus = sorted((a.node, i, a.member) for a in members for i in a.gpus)
    return {
        "attempt_id": reservation.attempt_id,
        "job_id": reservation.job_id,
        "queue": reservation.queue,
        "reserved_at": reservation.reserved_at,
        "d_node": nodes,
        "d_mcpu": [demand[n][0] for n in nodes],
        "d_memory": [demand[n][1] for n in nodes],
        "m_member": [a.member for a in members],
        "m_role": [a.role for a in members],
        "m_node": [a.node for a in members],
        "m_mcpu": [a.mcpu for a in members],
        "m_memory": [a.memory_mb for a in members],
        "g_node": [g[0] for g in gpus],
        "g_index": [g[1] for g in gpus],
        "g_member": [g[2] for g in gpus],
    }


def reserve_many_params(batch: Sequence[Reservation]) -> dict[str, Any]:
    """``reserve_params`` for several attempts: node demand summed over the batch."""
    demand: dict[str, list[int]] = {}
    members: list[tuple[str, Assignment]] = []
    gpus: list[tuple[str, int, str, int]] = []
    for r in batch:
        for a in sorted(r.assignments, key=lambda a: a.member):
            d = demand.setdefault(a.node, [0, 0])
            d[0] += a.mcpu
            d[1] += a.memory_mb
            members.append((r.attempt_id, a))
            gpus.extend((a.node, i, r.attempt_id, a.member) for i in a.gpus)
    nodes = sorted(demand)  # row locks in name order
    return {
        "d_node": nodes,
        "d_mcpu": [demand[n][0] for n in nodes],
        "d_memory": [demand[n][1] for n in nodes],
        "r_attempt": [r.attempt_id for r in batch],
        "r_job": [r.job_id for r in batch],
        "r_queue": [r.queue for r in batch],
        "r_at": [r.reserved_at for r in batch],
        "m_attempt": [m[0] for m in members],
        "m_member": [m[1].member for m in members],
        "m_role": [m[1].role for m in members],
        "m_node": [m[1].node for m in members],
        "m_mcpu": [m[1].mcpu for m in members],
        "m_memory": [m[1].memory_mb for m in members],
        "g_node": [g[0] for g in gpus],
        "g_index": [g[1] for g in gpus],
        "g_attempt": [g[2] for g in gpus],
        "g_member": [g[3] for g in gpus],
    }


def _sqlstate(error: BaseException) -> str:
    orig = getattr(error, "orig", None)
    for candidate in (orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return ""


@contextmanager
def _refused_as_conflict(what: str) -> Iterator[None]:
    try:
        yield
    except sa_exc.DBAPIError as error:
        reason = REFUSALS.get(_sqlstate(error))
        if reason is None:
            raise
        orig = getattr(error, "orig", None)
        detail = getattr(getattr(orig, "__cause__", None), "detail", None)
        raise Conflict(
            f"{what} was refused: {reason}" + (f" ({detail})" if detail else ""),
            fix="roll back, take a fresh snapshot and decide again",
        ) from error


def _reservations(rows: Sequence[Any]) -> list[Reservation]:
    out: list[Reservation] = []
    head: Any = None
    assignments: list[Assignment] = []
    for row in rows:
        if head is None or row.attempt_id != head.attempt_id:
            if head is not None:
                out.append(_reservation(head, assignments))
            head, assignments = row, []
        if row.member is not None:
            assignments.append(
                Assignment(row.member, row.role, row.node, tuple(row.gpus), row.mcpu, row.memory_mb)
            )
    if head is not None:
        out.append(_reservation(head, assignments))
    return out


def _reservation(head: Any, assignments: list[Assignment]) -> Reservation:
    reserved_at: datetime = head.reserved_at
    return Reservation(head.attempt_id, head.job_id, head.queue, tuple(assignments), reserved_at)


class PostgresReservationRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def reserve(self, reservation: Reservation) -> None:
        what = f"the reservation of attempt {reservation.attempt_id}"
        params = reserve_params(reservation)
        with translated(f"store {what}"), _refused_as_conflict(what):
            nodes = (await self._conn.execute(_RESERVE, params)).scalar()
        if nodes != len(params["d_node"]):  # not reached: the foreign keys refuse it first
            raise Conflict(f"{what}: a node does not exist", fix="decide again")

    async def reserve_many(self, batch: Sequence[Reservation]) -> None:
        """``reserve`` for several attempts in one statement: all of them or (Conflict) none."""
        if not batch:
            return
        what = f"the reservations of {len(batch)} attempts"
        params = reserve_many_params(batch)
        with translated(f"store {what}"), _refused_as_conflict(what):
            nodes = (await self._conn.execute(_RESERVE_MANY, params)).scalar()
        if nodes != len(params["d_node"]):
            raise Conflict(f"{what}: a node does not exist", fix="decide again")

    async def release(self, attempt_id: str) -> bool:
        with translated(f"release the reservation of attempt {attempt_id}"):
            released = (await self._conn.execute(_RELEASE, {"attempt_id": attempt_id})).scalar()
        return bool(released)

    async def get(self, attempt_id: str) -> Reservation | None:
        with translated(f"get the reservation of attempt {attempt_id}"):
            rows = (await self._conn.execute(_GET, {"attempt_id": attempt_id})).all()
        found = _reservations(rows)
        return found[0] if found else None

    async def live(self) -> builtins.list[Reservation]:
        with translated("list live reservations"):
            rows = (await self._conn.execute(_LIVE)).all()
        return _reservations(rows)
