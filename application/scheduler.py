"""The scheduling pass: snapshot → ``admission.decide`` → durable whole-envelope reservations.

Only the leader runs passes (see ``LeaderLease``); even so, the reservation store refuses a
double-booked GPU or an over-committed node, so two schedulers racing cannot break the fleet.
A placement becomes, in one transaction: the job's next attempt, its members (each with its
node), the reservation of every member's GPUs, CPUs and memory, and the job's move to
``starting``. Either all of that is stored or none of it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from application.context import Context
from domain.admission import Decisions, Placement, Reservation, decide
from domain.errors import Conflict, NotFound
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.ports import UnitOfWork

log = logging.getLogger("tuneplane.scheduler")


@dataclass(frozen=True, slots=True)
class PassResult:
    decisions: Decisions
    reserved: list[str]  # job ids whose reservation was stored
    lost: list[str]  # job ids whose placement lost a race (decided again next pass)


class Scheduler:
    def __init__(self, ctx: Context, snapshot_limit: int = 20_000, batch: int = 100) -> None:
        self.ctx = ctx
        self.snapshot_limit = snapshot_limit
        self.batch = batch

    async def decide(self) -> Decisions:
        async with self.ctx.uow() as uow:
            snapshot = await uow.scheduling.snapshot(self.snapshot_limit)
        return decide(snapshot, explain_waits=False)

    async def pass_once(self) -> PassResult:
        decisions = await self.decide()
        reserved, lost = await self.apply(decisions.placements)
        if reserved or lost:
            log.info("scheduling pass: %d reserved, %d lost a race", len(reserved), len(lost))
        return PassResult(decisions, reserved, lost)

    async def apply(self, placements: Sequence[Placement]) -> tuple[list[str], list[str]]:
        """Store placements in batches; a batch that hits a conflict is retried one by one,
        so one lost race costs only its own job."""
        reserved: list[str] = []
        lost: list[str] = []
        for start in range(0, len(placements), self.batch):
            chunk = placements[start : start + self.batch]
            try:
                async with self.ctx.uow() as uow:
                    for p in chunk:
                        await self._reserve(uow, p)
                    await uow.commit()
                reserved.extend(p.job_id for p in chunk)
                continue
            except (Conflict, NotFound):
                if len(chunk) == 1:
                    lost.append(chunk[0].job_id)
                    continue
            for p in chunk:
                try:
                    async with self.ctx.uow() as uow:
                        await self._reserve(uow, p)
                        await uow.commit()
                    reserved.append(p.job_id)
                except (Conflict, NotFound) as exc:
                    log.info("placement of %s lost a race: %s", p.job_id, exc)
                    lost.append(p.job_id)
        return reserved, lost

    async def _reserve(self, uow: UnitOfWork, p: Placement) -> None:
        now = self.ctx.clock.now()
        job = await uow.jobs.get(p.job_id)
        if job is None:
            raise NotFound(f"job {p.job_id} is gone", fix="nothing to do")
        number = len(await uow.attempts.for_job(job.id)) + 1
        attempt = Attempt(self.ctx.ids.new("att"), job.id, number, AttemptState.LAUNCHING, now, now)
        await uow.jobs.update(job.moved(JobState.STARTING, now), JobState.PENDING)
        await uow.attempts.add(attempt)
        for a in p.assignments:
            member = Member(
                self.ctx.ids.new("mem"),
                attempt.id,
                a.member,
                MemberState.PENDING,
                now,
                node=a.node,
                role=a.role,
            )
            await uow.members.add(member)
        await uow.reservations.reserve(Reservation(attempt.id, job.id, p.queue, p.assignments, now))
