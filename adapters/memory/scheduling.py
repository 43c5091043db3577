"""In-memory admission snapshot and placement storage (twin of adapters/postgres/scheduling.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from adapters.memory.db import Tx
from adapters.memory.jobs import MemoryJobRepository
from adapters.memory.reservations import MemoryReservationRepository
from adapters.memory.runs import MemoryAttemptRepository, MemoryMemberRepository
from domain.admission import (
    NodeView,
    PendingChanges,
    PendingJob,
    QueueView,
    Reservation,
    Snapshot,
    mcpu,
    queue_order,
)
from domain.fleet import Pool
from domain.lifecycle import JobState
from domain.ports import Start


class MemorySchedulingRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def snapshot(self, limit: int, now: datetime | None = None) -> Snapshot:
        tx = self._tx
        pools: dict[str, Pool] = {p.name: p for p in tx.select("pools", lambda p: True)}
        live: list[Reservation] = tx.select("reservations", lambda r: True)
        gpus_taken: dict[str, set[int]] = {}
        used: dict[str, list[int]] = {}
        queue_use: dict[str, list[int]] = {}
        for r in live:
            q = queue_use.setdefault(r.queue, [0, 0])
            q[0] += r.gpus
            q[1] += 1
            for a in r.assignments:
                gpus_taken.setdefault(a.node, set()).update(a.gpus)
                u = used.setdefault(a.node, [0, 0])
                u[0] += a.mcpu
                u[1] += a.memory_mb
        views = []
        for n in tx.select("nodes", lambda n: True):
            pool = pools[n.pool]
            u = used.get(n.name, [0, 0])
            taken = gpus_taken.get(n.name, set())
            views.append(
                NodeView(
                    name=n.name,
                    pool=n.pool,
                    free_gpus=tuple(i for i in range(pool.gpus_per_node) if i not in taken),
                    free_mcpu=mcpu(pool.cpus_per_node) - u[0],
                    free_memory_mb=pool.memory_mb_per_node - u[1],
                    why_not=n.why_not,
                )
            )
        views.sort(key=lambda v: v.name)
        queues = {
            q.name: QueueView(q, *queue_use.get(q.name, [0, 0]))
            for q in tx.select("queues", lambda q: True)
        }
        if limit == 0:
            return Snapshot(pools, views, queues, [])
        pending: list[PendingJob] = tx.project(
            "jobs",
            lambda j: (
                j.state is JobState.PENDING
                and (now is None or j.not_before is None or j.not_before <= now)
            ),
            lambda j: PendingJob(j.id, j.spec.queue, j.created_at, j.spec.roles),
        )
        pending = [replace(p, attempts=self._attempts(p.id)) for p in pending]
        return Snapshot(pools, views, queues, queue_order(pending, queues)[:limit])

    async def pending_changes(self, since: int | None) -> PendingChanges:
        """Every pending job, always (``full``): the in-memory store keeps no change marks, and
        reading it costs no round trip."""
        pending: list[PendingJob] = self._tx.project(
            "jobs",
            lambda j: j.state is JobState.PENDING,
            lambda j: PendingJob(
                j.id, j.spec.queue, j.created_at, j.spec.roles, not_before=j.not_before
            ),
        )
        return PendingChanges(
            None, True, tuple(replace(p, attempts=self._attempts(p.id)) for p in pending)
        )

    def _attempts(self, job_id: str) -> int:
        n = 0
        while self._tx.find("attempts", "number", (job_id, n + 1)) is not None:
            n += 1
        return n

    async def start(self, starts: Sequence[Start], now: datetime) -> list[str]:
        jobs = MemoryJobRepository(self._tx)
        attempts = MemoryAttemptRepository(self._tx)
        members = MemoryMemberRepository(self._tx)
        reservations = MemoryReservationRepository(self._tx)
        started = []
        for s in starts:
            job = await jobs.get(s.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            await jobs.update(job.moved(JobState.STARTING, now), JobState.PENDING)
            await attempts.add(s.attempt)
            for m in s.members:
                await members.add(m)
            await reservations.reserve(s.reservation)
            started.append(s.job_id)
        return started
