"""The scheduling pass: snapshot → ``admission.decide`` → durable whole-envelope reservations.

Only the leader runs passes (see ``LeaderLease``); even so, the reservation store refuses a
double-booked GPU or an over-committed node, so two schedulers racing cannot break the fleet.
A placement becomes, in one transaction: the job's next attempt, its members (each with its
node), the reservation of every member's GPUs, CPUs and memory, and the job's move to
``starting``. Either all of that is stored or none of it.

A pass stores its first placements while it decides the rest (``overlap``, application/overlap.py)
and runs with Python's garbage collector paused (``collector_paused``).

Before it stores a placement on a pool of a backend that reports its own capacity (Slurm), the
pass reads that capacity again (``capacity_sync``) and, if anything changed, decides afresh: a
node drained or down in Slurm a moment ago is not reserved (docs/slurm.md, "Capacity"); such a
pass decides whole before it stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from application import instruments as i
from application import log_context
from application.capacity_sync import capacity_sources, sync_capacity
from application.context import Context
from application.overlap import overlapped
from application.pending_view import PendingView
from domain.admission import (
    Decisions,
    PendingChanges,
    Placement,
    Reservation,
    Snapshot,
    decide,
)
from domain.errors import Conflict, NotFound
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, MemberState
from domain.placement_groups import node_disjoint_groups
from domain.ports import Start

log = logging.getLogger("tuneplane.scheduler")

RETRY_BATCH = 100  # a batch that hit a conflict is stored again in batches of this many
OVERLAP_EVERY = 256  # jobs decide walks between two turns of the store (application/overlap.py)


@dataclass(frozen=True, slots=True)
class PassResult:
    decisions: Decisions
    reserved: list[str]  # job ids whose reservation was stored
    lost: list[str]  # job ids whose placement lost a race (decided again next pass)


PAUSE_LIMIT_SECONDS = 5.0  # the collector is on again after this long, whatever the pass does


@contextlib.contextmanager
def collector_paused(limit: float = PAUSE_LIMIT_SECONDS) -> Iterator[None]:
    """Python's cyclic garbage collector is off while a pass runs (docs/scheduling.md): a full
    collection walks every object the process keeps (the view of 10,000 pending jobs among
    them), tens of milliseconds that would otherwise land inside a pass at random. Reference
    counting still frees what the pass drops; the collections it would have run come after.

    The pause is process-wide, so it is bounded: a pass still running after ``limit`` seconds
    (waiting on a lock, a slow database) turns the collector back on (inside an event loop;
    outside one the pause lasts as long as the block)."""
    was = gc.isenabled()
    gc.disable()
    timer: asyncio.TimerHandle | None = None
    if was:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing to time it with
            timer = asyncio.get_running_loop().call_later(limit, gc.enable)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        if was:
            gc.enable()


class Scheduler:
    """Keeps the pending jobs between passes (``_view``) and reads only the jobs changed since
    its last read (``pending_changes``), every ``resync_every`` passes all of them again; pools,
    nodes and queues are read whole every pass. The database stays the truth: a stale view
    only makes a placement that the store skips or refuses (docs/scheduling.md)."""

    def __init__(
        self,
        ctx: Context,
        snapshot_limit: int = 20_000,
        batch: int = 2_000,
        resync_every: int = 300,
        store_groups: int = 1,
        overlap: int = OVERLAP_EVERY,
    ) -> None:
        self.ctx = ctx
        self.snapshot_limit = snapshot_limit
        self.batch = batch
        self.store_groups = store_groups  # transactions at once when storing a pass (apply)
        self.resync_every = resync_every
        # store the placements while the rest of the pass is decided: decide yields to the
        # store every ``overlap`` jobs walked (0: decide the whole pass, then store it)
        self.overlap = overlap
        self._view = PendingView()
        self._mark: int | None = None
        self._reads = 0  # incremental reads since the last full one
        self._prepared: dict[str, tuple[Placement, Start]] = {}  # by job id (prepare)

    async def decide(self) -> tuple[Decisions, dict[str, int]]:
        """The decisions, and how many attempts each pending job already had."""
        snapshot, attempts = await self.read()
        return decide(snapshot, explain_waits=False), attempts

    async def read(self) -> tuple[Snapshot, dict[str, int]]:
        """The pass's snapshot (the kept view merged with what changed), and how many attempts
        each pending job in it already had."""
        now = self.ctx.clock.now()
        since = self._mark if self._reads < self.resync_every else None
        async with self.ctx.units.admission() as uow:
            fleet = await uow.scheduling.snapshot(0, now)
            changes = await uow.scheduling.pending_changes(since)
        self._merge(changes)
        ordered = self._view.ordered(fleet.queues)
        eligible = (j for j in ordered if j.not_before is None or j.not_before <= now)
        pending = list(itertools.islice(eligible, self.snapshot_limit))
        snapshot = Snapshot(fleet.pools, fleet.nodes, fleet.queues, pending, ordered=True)
        self._snapshot = snapshot
        return snapshot, {j.id: j.attempts for j in pending}

    def _merge(self, changes: PendingChanges) -> None:
        if changes.full:
            self._view.replace_all(changes.pending)
            self._reads = 0
        else:
            for gone in changes.gone:
                self._view.drop(gone)
            for job in changes.pending:
                self._view.put(job)
            self._reads += 1
        self._mark = changes.mark

    def forget(self) -> None:
        """Drop the view: the next pass reads every pending job again."""
        self._view, self._mark = PendingView(), None

    _snapshot: Snapshot | None = None

    async def pass_once(self) -> PassResult:
        with self.ctx.instruments.timer(i.ADMISSION_SECONDS), collector_paused():
            if self.overlap and not capacity_sources(self.ctx):
                snapshot, attempts = await self.read()
                decisions, reserved, lost = await overlapped(self, snapshot, attempts)
            else:
                decisions, attempts = await self.decide()
                if decisions.placements and await self._refreshed(decisions.placements):
                    decisions, attempts = await self.decide()
                reserved, lost = await self.apply(decisions.placements, attempts)
        for job_id in reserved:  # starting now (the next read says so too)
            self._view.drop(job_id)
        if reserved or lost:
            log.info("scheduling pass: %d reserved, %d lost a race", len(reserved), len(lost))
        self._measure(decisions.placements, set(reserved))
        return PassResult(decisions, reserved, lost)

    def _measure(self, placements: Sequence[Placement], reserved: set[str]) -> None:
        """Queue and pool gauges from this pass's snapshot (docs/operations.md#metrics): the
        jobs a placement was stored for move from pending to reserved."""
        snapshot, measure = self._snapshot, self.ctx.instruments
        if snapshot is None:
            return
        for p in placements:
            outcome = "reserved" if p.job_id in reserved else "lost"
            measure.inc(i.PLACEMENTS, queue=p.queue, outcome=outcome)
        pending = dict.fromkeys(snapshot.queues, 0)
        for job in snapshot.pending:
            pending[job.queue] = pending.get(job.queue, 0) + (job.id not in reserved)
        jobs = {name: q.jobs_in_use for name, q in snapshot.queues.items()}
        gpus = {name: q.gpus_in_use for name, q in snapshot.queues.items()}
        for p in placements:
            if p.job_id in reserved:
                jobs[p.queue] = jobs.get(p.queue, 0) + 1
                gpus[p.queue] = gpus.get(p.queue, 0) + sum(len(a.gpus) for a in p.assignments)
        free = dict.fromkeys(snapshot.pools, 0)
        for node in snapshot.nodes:
            if not node.why_not:
                free[node.pool] = free.get(node.pool, 0) + len(node.free_gpus)
        pool_of = {n.name: n.pool for n in snapshot.nodes} if reserved else {}
        for p in placements:
            if p.job_id in reserved:
                for a in p.assignments:
                    if (pool := pool_of.get(a.node)) is not None:
                        free[pool] = max(0, free.get(pool, 0) - len(a.gpus))
        measure.replace(i.PENDING_JOBS, pending)
        measure.replace(i.RESERVED_JOBS, jobs)
        measure.replace(i.RESERVED_GPUS, gpus)
        measure.replace(i.FREE_GPUS, free)

    async def _refreshed(self, placements: Sequence[Placement]) -> bool:
        """Read the capacity of the self-reporting backends the placements use; True when the
        fleet changed (the placements were decided on stale states)."""
        snapshot = self._snapshot
        if snapshot is None or not capacity_sources(self.ctx):
            return False
        pool_of = {n.name: n.pool for n in snapshot.nodes}
        backends = {
            snapshot.pools[pool_of[a.node]].backend
            for p in placements
            for a in p.assignments
            if a.node in pool_of and pool_of[a.node] in snapshot.pools
        }
        names = [s.name for s in capacity_sources(self.ctx, backends)]
        return bool(names) and await sync_capacity(self.ctx, names) > 0

    async def apply(
        self, placements: Sequence[Placement], attempts: Mapping[str, int] | None = None
    ) -> tuple[list[str], list[str]]:
        """Store placements in batches of ``batch`` (one transaction each, two statements on
        PostgreSQL whatever its size); a batch that hits a conflict is retried in batches of
        at most ``RETRY_BATCH`` and those one by one, so one lost race costs only its own job.
        With ``store_groups`` above 1 the placements are first split into that many groups
        that share no node, each stored so on its own connection at the same time (none waits
        on another's node locks). Returns (started, lost), each in the placements' order."""
        done = await self.store(placements, attempts or {})
        return (
            [p.job_id for p in placements if p.job_id in done],
            [p.job_id for p in placements if p.job_id not in done],
        )

    async def store(self, placements: Sequence[Placement], attempts: Mapping[str, int]) -> set[str]:
        """``apply``'s work: the ids of the jobs whose placement was stored."""
        groups = node_disjoint_groups(placements, self.store_groups)
        if len(groups) < 2:
            done = set(await self._store_all(placements, attempts))
        else:
            # every group runs to its end before an error is raised: no store is left running
            outcomes = await asyncio.gather(
                *(self._store_all(g, attempts) for g in groups), return_exceptions=True
            )
            done = set()
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
                done.update(outcome)
            log.info("stored %d placements in %d groups at once", len(placements), len(groups))
        return done

    async def _store_all(
        self, placements: Sequence[Placement], attempts: Mapping[str, int]
    ) -> list[str]:
        reserved: list[str] = []
        for first in range(0, len(placements), self.batch):
            reserved += await self._store(placements[first : first + self.batch], attempts)
        return reserved

    async def _store(self, chunk: Sequence[Placement], attempts: Mapping[str, int]) -> list[str]:
        try:
            return await self._start(chunk, attempts)
        except (Conflict, NotFound) as exc:
            if len(chunk) == 1:
                with log_context.bound(job_id=chunk[0].job_id):
                    log.info("placement of %s lost a race: %s", chunk[0].job_id, exc)
                return []
        size = RETRY_BATCH if len(chunk) > RETRY_BATCH else 1
        started: list[str] = []
        for first in range(0, len(chunk), size):
            started += await self._store(chunk[first : first + size], attempts)
        return started

    def prepare(self, placements: Sequence[Placement], attempts: Mapping[str, int]) -> None:
        """Build the rows of placements stored soon (their attempt, members, reservation): the
        overlapped pass builds them as decide hands them over, while the store's server works
        on the batch before, so the next batch is sent sooner. ``_start`` takes them (once);
        ``forget_prepared`` drops what was not taken."""
        now = self.ctx.clock.now()
        for p in placements:
            self._prepared[p.job_id] = (p, self._build(p, attempts.get(p.job_id, 0) + 1, now))

    def forget_prepared(self) -> None:
        self._prepared.clear()

    async def _start(self, chunk: Sequence[Placement], attempts: Mapping[str, int]) -> list[str]:
        now = self.ctx.clock.now()
        starts = []
        for p in chunk:  # a start is used once: a batch retried after a conflict builds anew
            made = self._prepared.pop(p.job_id, None)
            if made is not None and made[0] is p:
                starts.append(made[1])
            else:
                starts.append(self._build(p, attempts.get(p.job_id, 0) + 1, now))
        async with self.ctx.units.admission() as uow:
            started = await uow.scheduling.start(starts, now)
            await uow.commit()
        return started

    def _build(self, p: Placement, number: int, now: datetime) -> Start:
        attempt = Attempt(
            self.ctx.ids.new("att"), p.job_id, number, AttemptState.LAUNCHING, now, now
        )
        members = tuple(
            Member(
                self.ctx.ids.new("mem"),
                attempt.id,
                a.member,
                MemberState.PENDING,
                now,
                node=a.node,
                role=a.role,
            )
            for a in p.assignments
        )
        reservation = Reservation(attempt.id, p.job_id, p.queue, p.assignments, now)
        return Start(p.job_id, attempt, members, reservation)
