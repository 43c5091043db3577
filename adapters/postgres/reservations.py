"""Launch reservations: the whole envelope of an attempt, refused by the database itself when
it would double-book anything.

* each ``reservation_members`` row holds its GPUs as a set of GPU numbers (``gpus``, an
  ``int4multirange``): node ``n``'s GPU ``i`` is ``n.slot * 64 + i``. Statement triggers claim
  each number as bit ``i`` of its window's row of ``gpu_claims`` (one ``bigint`` mask a node) in
  the statement that inserts the member and clear it when the member goes, so a second
  reservation of a GPU is refused as a unique violation on ``pk_gpu_claims`` (migration 0037;
  a row per number in 0035); a CHECK keeps the set inside the node's
  window and below its GPU count (both copied from ``nodes`` under a foreign key that cascades
  their updates), so a GPU the node does not have is a check violation (migration 0032).
* ``nodes.used_mcpu`` / ``used_memory_mb`` are counters the reservations add to and release
  takes from, under ``CHECK (used_… BETWEEN 0 AND capacity)``: an over-committed node is a
  check violation.

Each of ``reserve`` (``reserve_many``) and ``release`` is one statement (one round trip, a
prepared statement whatever the envelope's size: the rows travel as arrays). ``reserve`` first
updates the counters, which takes the row lock of every node it touches, then inserts its rows;
so two transactions reserving on one node queue on that lock, and the later one sees the
earlier one's GPUs once it gets it (a unique violation at once). A writer that skips the
counters still cannot double-book: the claim's upsert of the window's mask waits for the other
transaction's end, then refuses a bit the other holds.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.arrays import int_array, literal_params, text_array, time_array
from adapters.postgres.errors import translated
from domain.admission import Assignment, Reservation
from domain.errors import Conflict

# One statement for a batch of attempts, whatever its size: the rows travel as arrays. The
# counters come first (their UPDATE takes the nodes' row locks, in name order); every insert
# reads its node's slot and GPU count from that UPDATE. Each member's GPUs travel as runs of
# consecutive indexes and become one set of GPU numbers (its node's window: slot * 64 + index).
_RESERVE_MANY = text(
    literal_params(
        "WITH d AS (SELECT * FROM unnest(CAST(:d_node AS text[]), CAST(:d_mcpu AS int[]), "
        "                                CAST(:d_memory AS int[])) AS d(node, mcpu, memory_mb)), "
        "upd AS (UPDATE nodes n SET used_mcpu = n.used_mcpu + d.mcpu, "
        "               used_memory_mb = n.used_memory_mb + d.memory_mb "
        "        FROM d WHERE n.name = d.node RETURNING n.name, n.slot, n.gpus), "
        "locked AS (SELECT count(*) AS nodes FROM upd), "
        "r AS (INSERT INTO reservations (attempt_id, job_id, queue, reserved_at) "
        "      SELECT x.* FROM locked CROSS JOIN unnest(CAST(:r_attempt AS text[]), "
        "             CAST(:r_job AS text[]), CAST(:r_queue AS text[]), "
        "             CAST(:r_at AS timestamptz[])) AS x(attempt_id, job_id, queue, reserved_at)), "
        "g AS (SELECT y.attempt_id, y.member, "
        "             range_agg(int4range(u.slot * 64 + y.lo, u.slot * 64 + y.hi)) AS gpus "
        "      FROM unnest(CAST(:g_attempt AS text[]), CAST(:g_member AS int[]), "
        "                  CAST(:g_node AS text[]), CAST(:g_lo AS int[]), CAST(:g_hi AS int[])) "
        "           AS y(attempt_id, member, node, lo, hi) "
        "      JOIN upd u ON u.name = y.node GROUP BY y.attempt_id, y.member), "
        # a member whose node does not exist gets no slot: the NOT NULL refuses it
        "m AS (INSERT INTO reservation_members (attempt_id, member, role, node, mcpu, memory_mb, "
        "                                       node_slot, node_gpus, gpus) "
        "      SELECT x.*, u.slot, u.gpus, coalesce(g.gpus, '{}') "
        "      FROM locked CROSS JOIN unnest(CAST(:m_attempt AS text[]), "
        "             CAST(:m_member AS int[]), CAST(:m_role AS text[]), CAST(:m_node AS text[]), "
        "             CAST(:m_mcpu AS int[]), CAST(:m_memory AS int[])) "
        "             AS x(attempt_id, member, role, node, mcpu, memory_mb) "
        "      LEFT JOIN upd u ON u.name = x.node "
        "      LEFT JOIN g ON g.attempt_id = x.attempt_id AND g.member = x.member) "
        "SELECT nodes FROM locked"
    )
)

# A member's GPU indexes, in order, from its set of GPU numbers (``{t}``: the member's alias).
LOCAL_GPUS = (
    "ARRAY(SELECT i - {t}.node_slot * 64 FROM unnest({t}.gpus) AS x "
    "      CROSS JOIN LATERAL generate_series(lower(x), upper(x) - 1) AS i ORDER BY i)"
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
    f"{LOCAL_GPUS.format(t='rm')} AS gpus "
    "FROM reservations r LEFT JOIN reservation_members rm ON rm.attempt_id = r.attempt_id "
)
_GET = text(_READ + "WHERE r.attempt_id = :attempt_id ORDER BY rm.member")
_LIVE = text(_READ + 'ORDER BY r.attempt_id COLLATE "C", rm.member')

# what each refusal means (SQLSTATE → reason; a unique violation on a GPU's claim apart)
GPU_TAKEN = "a GPU is already reserved"
REFUSALS = {
    "23505": "the attempt already holds a reservation",
    "23P01": GPU_TAKEN,  # the exclusion constraint before migration 0035
    "23514": "a node would exceed its CPUs or memory, or has no such GPU",
    "23503": "a node or the attempt does not exist",
    "23502": "a node does not exist",
    "40P01": "it lost a race with a concurrent transaction (deadlock)",
    "40001": "it lost a race with a concurrent transaction (serialization)",
}


def gpu_runs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted GPU indexes as runs ``[lo, hi)`` of consecutive ones: (0, 1, 2, 5) → [(0, 3),
    (5, 6)]. An index given twice is refused (it would be one GPU reserved twice)."""
    ordered = sorted(gpus)
    if ordered and ordered[-1] - ordered[0] == len(ordered) - 1 == len(set(ordered)) - 1:
        return [(ordered[0], ordered[-1] + 1)]  # the common case: one run, no index twice
    runs: list[tuple[int, int]] = []
    for i in ordered:
        if runs and i < runs[-1][1]:
            raise Conflict(f"GPU {i} is listed twice", fix="decide again")
        if runs and i == runs[-1][1]:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


_MEMBER = operator.attrgetter("member")


def reserve_many_params(batch: Sequence[Reservation]) -> dict[str, Any]:
    """The statement's parameters: the rows of each table as array literals (arrays.py), node
    demand summed over the batch."""
    demand: dict[str, list[int]] = {}
    members: list[tuple[str, Assignment]] = []
    runs: list[tuple[str, int, str, int, int]] = []
    for r in batch:
        attempt = r.attempt_id
        for a in sorted(r.assignments, key=_MEMBER) if len(r.assignments) > 1 else r.assignments:
            d = demand.get(a.node)
            if d is None:
                demand[a.node] = [a.mcpu, a.memory_mb]
            else:
                d[0] += a.mcpu
                d[1] += a.memory_mb
            members.append((attempt, a))
            for lo, hi in gpu_runs(a.gpus):
                runs.append((attempt, a.member, a.node, lo, hi))
    nodes = sorted(demand)  # row locks in name order
    return {
        "d_node": text_array(nodes),
        "d_mcpu": int_array([demand[n][0] for n in nodes]),
        "d_memory": int_array([demand[n][1] for n in nodes]),
        "r_attempt": text_array([r.attempt_id for r in batch]),
        "r_job": text_array([r.job_id for r in batch]),
        "r_queue": text_array([r.queue for r in batch]),
        "r_at": time_array([r.reserved_at for r in batch]),
        "m_attempt": text_array([m[0] for m in members]),
        "m_member": int_array([m[1].member for m in members]),
        "m_role": text_array([m[1].role for m in members]),
        "m_node": text_array([m[1].node for m in members]),
        "m_mcpu": int_array([m[1].mcpu for m in members]),
        "m_memory": int_array([m[1].memory_mb for m in members]),
        "g_attempt": text_array([g[0] for g in runs]),
        "g_member": int_array([g[1] for g in runs]),
        "g_node": text_array([g[2] for g in runs]),
        "g_lo": int_array([g[3] for g in runs]),
        "g_hi": int_array([g[4] for g in runs]),
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
        cause = getattr(getattr(error, "orig", None), "__cause__", None)
        if getattr(cause, "constraint_name", None) == "pk_gpu_claims":
            reason = GPU_TAKEN
        detail = getattr(cause, "detail", None)
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
        await self._reserve([reservation], f"the reservation of attempt {reservation.attempt_id}")

    async def reserve_many(self, batch: Sequence[Reservation]) -> None:
        """``reserve`` for several attempts in one statement: all of them or (Conflict) none."""
        if batch:
            await self._reserve(batch, f"the reservations of {len(batch)} attempts")

    async def reserve_encoded(self, batch: Sequence[Reservation], params: dict[str, Any]) -> None:
        """``reserve_many`` with its parameters already encoded (``reserve_many_params(batch)``,
        by the caller while the server was busy: the scheduling store)."""
        if batch:
            await self._reserve(batch, f"the reservations of {len(batch)} attempts", params)

    async def _reserve(
        self, batch: Sequence[Reservation], what: str, params: dict[str, Any] | None = None
    ) -> None:
        try:
            if params is None:
                params = reserve_many_params(batch)
        except Conflict as refused:
            raise Conflict(f"{what} was refused: {refused.message}", fix=refused.fix) from None
        with translated(f"store {what}"), _refused_as_conflict(what):
            nodes = (await self._conn.execute(_RESERVE_MANY, params)).scalar()
        if nodes != len(
            {a.node for r in batch for a in r.assignments}
        ):  # not reached: the NOT NULL refuses it first
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
