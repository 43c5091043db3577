"""A connection's first store made before the first pass: the scheduling store run once, for one
job on one node made for it, inside a savepoint that is rolled back (docs/scheduling.md,
"Warming the store's connections").

A connection's first store costs the server more than its next ones: the trigger functions are
compiled, their statements and the store's two statements planned, the tables' and indexes'
caches loaded (15-40 ms at 1,277 placements; docs/benchmarks.md, sessions 45 and 47). Run once
on a placement of one job, those costs are paid here, when the leader takes the lead, instead of
in its first pass. The rows travel through every trigger and check the real store runs (the
foreign keys' locks, the GPU claims, the timeline), so their plans are made too: a check that
sees no row returns before it plans anything.

Nothing is left: the pool, node and job are made for the warm-up (names no one else uses, the
slot above the highest taken) and everything goes in the savepoint's rollback, even if the
caller then commits; a notification queued in it is dropped. A row lock is taken only on those
rows. The plans made for one row are those the connection would keep after a one-job pass:
every trigger statement of the store plans the same way for any number of rows (migrations
0036, 0037 and 0039).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from domain.admission import Assignment, Reservation
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, MemberState
from domain.ports import Start

_POOL = text(
    "INSERT INTO pools (name, fleet, backend, gpus_per_node, mcpu_per_node, memory_mb_per_node) "
    "VALUES (:name, :name, 'warm-up', 1, 1000, 1024)"
)
# the slot above the highest taken (slots are checked up to 33,554,430: GPU numbers stay int4);
# none when the highest is taken: no warm-up then. One probe of the slots' index.
_NODE = text(
    "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, slot, gpus) "
    "SELECT :name, :name, 'schedulable', 'connected', 1000, 1024, m.slot + 1, 1 "
    "FROM (SELECT coalesce(max(slot), 0) AS slot FROM nodes) AS m WHERE m.slot < 33554430"
)
_JOB = text(
    "INSERT INTO jobs (id, preview_id, owner, state, spec, created_at, updated_at, queue) "
    "VALUES (:name, :name, :name, 'pending', '{}', :now, :now, :name)"
)


def warm_up_start(name: str, now: datetime) -> Start:
    """The placement the warm-up stores: job ``name``'s first attempt, one member on node
    ``name`` with its one GPU."""
    attempt = Attempt(f"{name}-att", name, 1, AttemptState.LAUNCHING, now, now)
    member = Member(f"{name}-mem", attempt.id, 0, MemberState.PENDING, now, node=name)
    assignment = Assignment(0, "main", name, (0,), 1000, 1024)
    reservation = Reservation(attempt.id, name, name, (assignment,), now)
    return Start(name, attempt, (member,), reservation)


async def warm_store(
    conn: AsyncConnection,
    start: Callable[[Sequence[Start], datetime], Awaitable[list[str]]],
    now: datetime,
) -> None:
    """Run ``start`` (the scheduling store) on ``conn`` for a job and node made for it, in a
    savepoint rolled back whatever happens."""
    name = f"tp-warm-up-{uuid.uuid4().hex}"
    savepoint = await conn.begin_nested()
    try:
        await conn.execute(_POOL, {"name": name})
        if (await conn.execute(_NODE, {"name": name})).rowcount != 1:
            return  # every slot up to the highest is taken: nothing to warm on
        await conn.execute(_JOB, {"name": name, "now": now})
        if await start([warm_up_start(name, now)], now) != [name]:
            raise RuntimeError("the warm-up's store skipped its own job")
    finally:
        await savepoint.rollback()
