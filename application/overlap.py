"""The overlapped pass: the placements are stored while the rest of the pass is decided.

``decide`` is pure over the pass's snapshot, so what the store does cannot change what later
jobs are decided; and a placement is final once made (later jobs only see what it left). So
the scheduler need not wait for the whole pass before it stores: ``decide_steps`` hands over
the placements made so far every few hundred jobs walked, and a store task stores them
meanwhile, in order, one batch at a time (up to ``Scheduler.batch``, node-disjoint groups
as ``Scheduler.store``), while the next jobs are decided. On PostgreSQL the server's work on
one batch runs on another core while this process decides the next jobs.

Nothing else changes: each batch is all or nothing and a conflict costs only its own job
(``Scheduler.store``); the store stops taking batches once deciding fails or the pass is
cancelled, and the pass waits for the batch in flight before it raises (cancelled while it
waits, it cancels that batch: its transaction rolls back), so no store is left running behind
it; a store that fails ends the pass with its error, as ``apply`` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from domain.admission import Decisions, Placement, Snapshot, decide_steps

if TYPE_CHECKING:
    from application.scheduler import Scheduler

log = logging.getLogger("tuneplane.scheduler")


async def overlapped(
    sched: Scheduler, snapshot: Snapshot, attempts: Mapping[str, int]
) -> tuple[Decisions, list[str], list[str]]:
    """Decide ``snapshot`` and store its placements at the same time: (decisions, reserved,
    lost), the last two in the placements' order."""
    steps = decide_steps(snapshot, explain_waits=False, every=sched.overlap)
    ready: list[Placement] = []
    stored: set[str] = set()
    more = asyncio.Event()
    decided = False

    async def store() -> None:
        while ready or not decided:
            if not ready:
                more.clear()
                await more.wait()
                continue
            batch = ready[: sched.batch]
            del ready[: len(batch)]
            stored.update(await sched.store(batch, attempts))

    worker = asyncio.create_task(store())
    decisions: Decisions | None = None
    try:
        while decisions is None and not worker.done():
            try:
                made = next(steps)
            except StopIteration as stop:
                decisions = stop.value
                break
            if made:
                sched.prepare(made, attempts)  # built now, while the store's server works
                ready.extend(made)
                more.set()
            await asyncio.sleep(0)  # the store's turn: send a batch, read an answer
    finally:
        if decisions is None:
            ready.clear()  # deciding failed or was cancelled: nothing more is stored
        decided = True
        more.set()
        try:
            await asyncio.wait([worker])  # the batch in flight ends first
        except BaseException:  # cancelled while waiting: the batch in flight is rolled back
            worker.cancel()
            raise
        finally:
            sched.forget_prepared()  # what no batch took (the store stopped early)
        if not worker.cancelled() and worker.exception() is not None:  # retrieved here
            log.warning("the overlapped store failed: %s", worker.exception())
    worker.result()  # the store's error, if it failed (and deciding did not)
    assert decisions is not None
    placements = decisions.placements
    return (
        decisions,
        [p.job_id for p in placements if p.job_id in stored],
        [p.job_id for p in placements if p.job_id not in stored],
    )
