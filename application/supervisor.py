"""The supervisor: each tick, the scheduling pass reserves and places pending jobs, then every
active job is launched and followed to a final state.

Only the leader ticks (``LeaderLease``: one per database). It never holds a transaction across a
backend call: it reads, calls the backend, then writes with compare-and-set updates, so should
two ever act at once, launches are idempotent per member and a lost compare-and-set just means
another got there first. A reservation is released in the same transaction that records the
last of its members as known stopped; a member whose node is out of contact is ``unknown`` and
keeps its reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

from application import checkpoints, checkpoints_in_place, log_context
from application.capacity_sync import sync_capacity
from application.context import Context
from application.gang import GangCoordinator
from application.scheduler import Scheduler
from application.supervisor_chores import log_moved, release_finished, retry_or_end
from application.supervisor_edges import adopt_held, assignments, collect_logs, fail_attempt
from domain.admission import Assignment
from domain.artifacts import ArtifactRecord, Manifest
from domain.backend_ports import ExecutionBackend, LaunchRequest, Observation
from domain.coordination_ports import LeaderLease
from domain.errors import Conflict, NotFound, TunePlaneError, Unavailable
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import (
    MEMBER_FINAL,
    JobState,
    MemberState,
)
from domain.progress import driver_ended, first_failure, job_after, member_after

log = logging.getLogger("tuneplane.supervisor")

ACTIVE = (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)


class Supervisor:
    def __init__(
        self,
        ctx: Context,
        lease: LeaderLease | None = None,
        sweep_every: int = 60,
        capacity_every: int = 10,
        scheduler: Scheduler | None = None,
        gangs: GangCoordinator | None = None,
    ) -> None:
        self.ctx = ctx
        self.lease = lease  # None: this is the only control loop (tests, the simulator)
        self.scheduler = scheduler or Scheduler(ctx)
        self.gangs = gangs or GangCoordinator(ctx)
        self.sweep_every = sweep_every
        # pools and nodes a backend's scheduler reports (Slurm) are read every this many ticks
        # for the fleet's view, and again before each reservation on them (Scheduler)
        self.capacity_every = capacity_every
        self._ticks = 0
        self._wake = asyncio.Event()
        self._stops: dict[str, asyncio.Task[None]] = {}
        self._keeping: asyncio.Task[None] | None = None  # checkpoints being kept
        self._kept_at: datetime | None = None
        self._unreachable: set[str] = set()  # backends whose last sweep was skipped

    def wake(self) -> None:
        """Ask for a tick now instead of at the next poll (after a commit or a cancel)."""
        self._wake.set()

    def _due(self, job: Job) -> None:
        """A job its retry policy queued again with no backoff left: the next tick's scheduling
        pass reserves it at once instead of a poll later (the commit of this tick's writes
        comes first: the tick goes on, then the run loop finds the wake-up set)."""
        if job.state is JobState.PENDING and (
            job.not_before is None or job.not_before <= self.ctx.clock.now()
        ):
            self.wake()

    async def run(self, poll_seconds: float = 1.0) -> None:
        while True:
            try:
                await self.tick()
            except Unavailable as exc:
                log.warning("supervisor: %s", exc)
            except Exception:  # keep supervising; the error is in the log
                log.exception("supervisor tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), poll_seconds)
            self._wake.clear()

    async def close(self) -> None:
        tasks = [*self._stops.values(), *([self._keeping] if self._keeping else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def tick(self) -> bool:
        """One round; False (doing nothing) when another process leads."""
        if self.lease is not None and not await self.lease.acquire():
            return False
        tick, self._ticks = self._ticks, self._ticks + 1  # counted first: a round that fails
        # at the sweep or the capacity sync must not make every later round do it again
        if tick % self.sweep_every == 0:
            await self.sweep()
        self._keep_checkpoints(tick % self.sweep_every == 0)
        if tick % self.capacity_every == 0:
            await sync_capacity(self.ctx)  # pools and nodes a backend's scheduler reports
        await self.gangs.housekeeping()
        await self.scheduler.pass_once()
        await self.advance_all()
        return True

    async def advance_all(self) -> None:
        cursor: str | None = None
        while True:
            async with self.ctx.units.jobs() as uow:
                page = await uow.jobs.list(owner=None, states=ACTIVE, limit=100, cursor=cursor)
            for job in page.jobs:
                with log_context.bound(job_id=job.id):  # on every line this step logs
                    try:
                        await self._lost_race_is_fine(job, self._advance(job))
                    except Unavailable as exc:  # this job waits; the others go on
                        log.warning("job %s not advanced: %s", job.id, exc)
                    except Exception:  # a fault in one job's step never stops the others'
                        log.exception("job %s not advanced", job.id)
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def close_lease(self) -> None:
        if self.lease is not None:
            await self.lease.release()

    async def sweep(self) -> int:
        """Release members held although recorded finished (``release_finished``)."""
        return await release_finished(self.ctx, self._unreachable)

    def _keep_checkpoints(self, now: bool) -> None:
        """Beside the ticks (hashing a large checkpoint takes seconds), at the sweep and every
        ``limits.checkpoint_harvest``: keep the complete checkpoints of running attempts in
        the blob store, and those of jobs that ended, removing their directories; and sweep
        those kept in place (docs/checkpoints.md)."""
        storage = self.ctx.checkpoints if self.ctx.blobs is not None else None
        if self._keeping is not None and not self._keeping.done():
            return
        if storage is None and not self.ctx.backend_checkpoints:
            return
        at, last = self.ctx.clock.now(), self._kept_at
        if not now and last is not None and at - last < self.ctx.limits.checkpoint_harvest:
            return
        self._kept_at = at
        self._keeping = asyncio.create_task(checkpoints_in_place.keep_all(self.ctx, storage))

    @staticmethod
    async def _lost_race_is_fine(job: Job, step: Coroutine[Any, Any, None]) -> None:
        """Run one step for ``job``; a lost compare-and-set means another supervisor moved it."""
        try:
            await step
        except Conflict:
            log.debug("job %s changed under us; the next tick decides", job.id)

    async def _launch(
        self,
        backend: ExecutionBackend,
        job: Job,
        attempt: Attempt,
        members: list[Member],
        placed: dict[int, Assignment],
    ) -> None:
        """Start every member that has no handle yet. Safe to repeat (launch is idempotent)."""
        spec, source, bundle = job.spec, None, None
        try:
            if spec.capsule is not None:  # the capsule holds the source
                bundle = await self.ctx.blob_store().read(spec.capsule.blob)
            elif spec.source is not None:
                source = await self.ctx.blob_store().read(spec.source.digest)
        except NotFound as exc:  # absent, or refused by the store's digest check
            what = "Job Capsule" if spec.capsule is not None else "source archive"
            why = f"its {what} cannot be read: {exc.message}"
            await fail_attempt(self.ctx, backend, job, attempt, why, self._due)
            return
        store = self.ctx.outputs_of(backend)
        kept = self.ctx.checkpoints_of(backend)
        saved = None
        if kept is not None and any(m.handle is None for m in members):
            saved = await checkpoints.for_launch(self.ctx, kept, job.id, attempt.number)
        try:  # kept in place (Slurm's shared directory): none of the above
            saved = saved or await checkpoints_in_place.launching(
                self.ctx, backend.name, job.id, attempt.number, members
            )
        except Unavailable as exc:
            log.warning("launch of attempt %s deferred: %s", attempt.id, exc)
            return
        if saved is not None:
            await checkpoints.record_resume(self.ctx, attempt, saved)
        for member in members:
            if member.handle is not None or member.state is not MemberState.PENDING:
                continue
            outputs = None
            if store is not None:
                outputs = await store.prepare(job.id, attempt.id, member.index)
            request = LaunchRequest(
                job.id,
                attempt.id,
                member.id,
                member.index,
                job.spec,
                source,
                placed.get(member.index),
                bundle,
                outputs,
                attempt.number,
                saved.work if saved else None,
                saved.resume_root if saved else None,
                saved.resume if saved else None,
            )
            try:
                with log_context.bound(member=member.index):
                    handle = await backend.launch(request)
            except Unavailable as exc:
                log.warning("launch of %s deferred: %s", member.id, exc)
                return
            except TunePlaneError as exc:
                why = f"member {member.index} could not launch: {exc}"
                await fail_attempt(self.ctx, backend, job, attempt, why, self._due)
                return
            async with self.ctx.units.jobs() as uow:
                now = self.ctx.clock.now()
                await uow.members.update(
                    member.moved(MemberState.STARTING, now, handle=handle), MemberState.PENDING
                )
                await uow.commit()

    async def _advance(self, job: Job) -> None:
        async with self.ctx.units.placement() as uow:
            attempts = await uow.attempts.for_job(job.id)
            if not attempts:
                return
            attempt = attempts[-1]
            members = await uow.members.for_attempt(attempt.id)
            placed = await assignments(uow, attempt.id)
        with log_context.bound(attempt=attempt.number):
            await self._advance_attempt(job, attempt, members, placed)

    async def _advance_attempt(
        self, job: Job, attempt: Attempt, members: list[Member], placed: dict[int, Assignment]
    ) -> None:
        backend = self.ctx.direct(job.spec.backend)
        if backend is None:  # a coordinated backend: the gang coordinator launches its members
            await self._advance_gang(job, attempt, members)
            return
        stopping = job.state is JobState.STOPPING
        failing = first_failure(members)
        done = driver_ended(members, job.spec.runtime.process_model)
        if (
            not stopping
            and failing is None
            and done is None
            and any(m.state is MemberState.PENDING for m in members)
        ):
            await self._launch(backend, job, attempt, members, placed)
            async with self.ctx.units.jobs() as uow:
                current = await uow.jobs.get(job.id)
                members = await uow.members.for_attempt(attempt.id)
            if current is None or current.state is not job.state:
                return  # it failed to launch, or was cancelled meanwhile: next tick decides
            if any(m.state is MemberState.PENDING for m in members):
                return  # launch deferred (backend unavailable)
        ending = stopping or failing is not None or done is not None
        if ending:
            adopted = await adopt_held(self.ctx, backend, members)
            if adopted is None:
                return  # cannot tell which members started: never record them on a guess
            members = adopted
        seen: dict[str, tuple[Observation, bytes | None]] = {}
        for m in members:
            if m.state in MEMBER_FINAL or m.handle is None:
                continue
            if ending:
                self._request_stop(backend, m.handle)
            try:
                obs = await backend.observe(m.handle)
            except Unavailable as exc:
                log.warning("cannot observe %s: %s", m.id, exc)
                continue
            logs = (
                await collect_logs(self.ctx, backend, m.handle) if obs.status == "exited" else None
            )
            seen[m.id] = (obs, logs)
        manifests = await self._manifests(backend, job, attempt, members, seen)
        released = await self._record(job, attempt, members, seen, manifests)
        for handle in released:
            self._stops.pop(handle, None)  # its member is final: no stop to remember
            with contextlib.suppress(TunePlaneError):
                await backend.release(handle)

    async def _manifests(
        self,
        backend: ExecutionBackend,
        job: Job,
        attempt: Attempt,
        members: list[Member],
        seen: dict[str, tuple[Observation, bytes | None]],
    ) -> dict[str, Manifest]:
        """The output manifests of members seen completing (exit 0), read before the
        transaction that records them (hashing files takes a while)."""
        out: dict[str, Manifest] = {}
        store = self.ctx.outputs_of(backend)
        if store is None:
            return out
        for m in members:
            obs = seen.get(m.id, (None, None))[0]
            if obs is not None and obs.status == "exited" and obs.exit_code == 0:
                manifest = await store.scan(job.id, attempt.id, m.index)
                if manifest is not None:
                    out[m.id] = manifest
        return out

    async def _advance_gang(self, job: Job, attempt: Attempt, members: list[Member]) -> None:
        """A two-phase launch (node backend): the coordinator begins, decides and reads what
        the nodes reported; what it observed is recorded as for any backend."""
        seen = await self.gangs.step(job, attempt, members)
        if seen is None:
            return
        async with (
            self.ctx.units.jobs() as uow
        ):  # the coordinator moved members on: read them again
            current = await uow.jobs.get(job.id)
            now_attempt = await uow.attempts.get(attempt.id)
            members = await uow.members.for_attempt(attempt.id)
        if current is None or now_attempt is None:
            return
        await self._record(current, now_attempt, members, {k: (o, None) for k, o in seen.items()})

    async def _record(
        self,
        job: Job,
        attempt: Attempt,
        members: list[Member],
        seen: dict[str, tuple[Observation, bytes | None]],
        manifests: dict[str, Manifest] | None = None,
    ) -> list[str]:
        """Write what was observed (and the manifests of members that completed); return the
        handles that may now be released. Nothing changed (the usual tick of a running job):
        no transaction at all."""
        now = self.ctx.clock.now()
        stopping = job.state is JobState.STOPPING
        failing = first_failure(members)
        done = driver_ended(members, job.spec.runtime.process_model)
        released: list[str] = []
        updated: list[Member] = []
        logs: dict[int, bytes] = {}  # member index → its log, kept after the end
        artifacts: dict[int, ArtifactRecord] = {}
        for m in members:
            new = m
            if m.state not in MEMBER_FINAL and m.handle is None and stopping:
                new = m.moved(MemberState.STOPPED, now, "stopped before it started")
            elif m.state not in MEMBER_FINAL and m.handle is None and failing is not None:
                new = m.moved(MemberState.FAILED, now, f"not started: {failing}")
            elif m.id in seen:
                obs, text = seen[m.id]
                new = member_after(m, obs, stopping, failing, now, done)
                if text is not None:
                    logs[m.index] = text
                if new.state in MEMBER_FINAL and m.handle:
                    released.append(m.handle)
                manifest = (manifests or {}).get(m.id)
                if manifest is not None and new.state is MemberState.SUCCEEDED:
                    artifacts[m.index] = ArtifactRecord(
                        m.id, job.id, attempt.id, attempt.number, m.index, manifest, now
                    )
            updated.append(new)
        caused = attempt
        for obs, _ in seen.values():  # the first cause a backend proved is the attempt's
            if obs.cause and obs.status in ("exited", "missing") and not attempt.end:
                caused = caused.caused(obs.cause, now)
        job_now, attempt_now = job_after(job, caused, updated, now)
        finished = all(m.state in MEMBER_FINAL for m in updated)  # every member known stopped
        if (
            all(new is old for new, old in zip(updated, members, strict=True))
            and not logs
            and not artifacts
            and attempt_now is attempt
            and job_now is job
            and not finished
        ):
            return released
        async with self.ctx.units.outcome() as uow:
            for old, new in zip(members, updated, strict=True):
                if new.index in logs:
                    data, limit = logs[new.index], self.ctx.limits.max_log_bytes
                    await uow.logs.save(attempt.id, new.index, data[-limit:], len(data) > limit)
                if new.index in artifacts:
                    await uow.artifacts.record(artifacts[new.index])
                if new is not old:
                    await uow.members.update(new, old.state)
            if attempt_now is not attempt:
                await uow.attempts.update(attempt_now, attempt.state)
            if job_now.state is JobState.FAILED and job.state is not JobState.FAILED:
                job_now = await retry_or_end(uow, job, job_now, attempt_now, now)
                self._due(job_now)
            if job_now is not job:
                await uow.jobs.update(job_now, job.state)
            if finished:
                await uow.reservations.release(attempt.id)
            await uow.commit()
        log_moved(job, job_now)
        return released

    def _request_stop(self, backend: ExecutionBackend, handle: str) -> None:
        previous = self._stops.get(handle)
        if previous is not None and not (
            previous.done() and not previous.cancelled() and previous.exception() is not None
        ):
            return  # sent, or being sent; one that failed (node out of contact) is sent again
        grace = self.ctx.limits.stop_grace_seconds
        task = asyncio.create_task(backend.stop(handle, grace))
        self._stops[handle] = task
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # mark retrieved
