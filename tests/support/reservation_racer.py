"""A scheduler without a leader lease, for the reservation race test:
``python -m tests.support.reservation_racer URL SHARE SHARES [--seconds S]``.

It prints ``ready``, waits for a line on stdin (so that racers start together), then loops:
take a snapshot, keep the pending jobs of its share (job number % SHARES == SHARE), decide with
``domain.admission.decide`` and store each placement in its own transaction, as the scheduler
does (job → starting, attempt, members, reservation). Racers decide over the same free
capacity for different jobs, so they pick the same GPUs; only the database keeps them apart.
After each pass it releases about half of what it holds, so the race goes on over capacity
freed by both. It stops when its share has no pending job left (or after S seconds) and
prints one JSON line: reserved, conflicts (and by SQLSTATE), released, passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime

from adapters.postgres.engine import create_engine
from adapters.postgres.reservations import REFUSALS
from adapters.postgres.uow import PostgresUnitOfWork
from domain.admission import Placement, Reservation, decide
from domain.errors import Conflict, NotFound
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.unit_of_work import UnitOfWorkFactory


def _share_of(job_id: str, shares: int) -> int:
    return int(job_id.rsplit("-", 1)[1]) % shares


async def _reserve(uow_factory: UnitOfWorkFactory, p: Placement, tag: str) -> str:
    now = datetime.now(UTC)
    async with uow_factory() as uow:
        job = await uow.jobs.get(p.job_id)
        if job is None:
            raise NotFound(f"job {p.job_id} is gone", fix="nothing to do")
        number = len(await uow.attempts.for_job(job.id)) + 1
        attempt_id = f"att-{tag}-{job.id}-{number}"
        attempt = Attempt(attempt_id, job.id, number, AttemptState.LAUNCHING, now, now)
        await uow.jobs.update(job.moved(JobState.STARTING, now), JobState.PENDING)
        await uow.attempts.add(attempt)
        for a in p.assignments:
            member_id = f"mem-{attempt.id}-{a.member}"
            await uow.members.add(
                Member(
                    member_id,
                    attempt.id,
                    a.member,
                    MemberState.PENDING,
                    now,
                    node=a.node,
                    role=a.role,
                )
            )
        await uow.reservations.reserve(Reservation(attempt.id, job.id, p.queue, p.assignments, now))
        await uow.commit()
    return attempt.id


async def race(url: str, share: int, shares: int, seconds: float) -> dict[str, int]:
    engine = create_engine(url, pool_size=2)
    rng = random.Random(share)
    held: list[str] = []
    stats = {"reserved": 0, "conflicts": 0, "released": 0, "passes": 0}

    def uow() -> PostgresUnitOfWork:
        return PostgresUnitOfWork(engine)

    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            async with uow() as u:
                snap = await u.scheduling.snapshot(5000)
            mine = [j for j in snap.pending if _share_of(j.id, shares) == share]
            if not mine:
                break
            stats["passes"] += 1
            for p in decide(replace(snap, pending=mine), explain_waits=False).placements:
                try:
                    held.append(await _reserve(uow, p, str(share)))
                    stats["reserved"] += 1
                except Conflict as exc:
                    stats["conflicts"] += 1
                    for code, reason in REFUSALS.items():
                        if reason in exc.message:
                            stats[code] = stats.get(code, 0) + 1
            rng.shuffle(held)
            keep = len(held) // 2
            for attempt_id in held[keep:]:
                async with uow() as u:
                    if await u.reservations.release(attempt_id):
                        stats["released"] += 1
                    await u.commit()
            del held[keep:]
    finally:
        await engine.dispose()
    return stats


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("share", type=int)
    p.add_argument("shares", type=int)
    p.add_argument("--seconds", type=float, default=120.0)
    a = p.parse_args()
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(asyncio.run(race(a.url, a.share, a.shares, a.seconds))), flush=True)


if __name__ == "__main__":
    main()
