"""The two-phase launch coordinator of the node backend (runs inside the supervisor).

For an attempt placed on node-backend pools it (1) *begins* the launch: records each member's
node and fencing epoch and the gang's rendezvous port, after which the gateways send Prepare to
the nodes; (2) *decides*: commit once every member voted yes, abort on any no, on a stop request
or when a member stays silent past the prepare timeout. The decision is recorded durably in the
database before any node is told to start (presumed abort: no decision means nothing starts);
(3) after an abort, records the attempt failed (or cancelled) and releases its reservation at
once, since nothing ran; (4) after a commit, turns what the nodes reported into observations for
the supervisor, which records them as for any backend. A node out of contact makes its members
``unknown``, never failed. Stops are requested through the ledger; the gateways deliver them.

Nothing here talks to a node: the coordinator and the gateways meet only in the database, so a
coordinator that dies at any point is replaced by another that reads the same ledger.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from application import instruments as i
from application.context import Context
from application.fleet_check import settle as settle_checks
from application.node_checkpoints import record_resumed
from application.reconcile import fence_node
from application.supervisor_chores import log_moved, retry_or_end
from domain.coordination_ports import NODE_WORK
from domain.errors import Conflict
from domain.fleet import Connectivity
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, AttemptState, JobState, MemberState
from domain.node_ports import LaunchPlan, MemberLaunch
from domain.node_protocol import Decision, Phase
from domain.ports import Observation
from domain.progress import driver_ended
from domain.retry import LAUNCH_FAILED, REQUEUED
from domain.unit_of_work import FleetUnit, PlacementUnit

log = logging.getLogger("tuneplane.gang")

RENDEZVOUS_PORTS = range(29500, 30000)


@dataclass(frozen=True, slots=True)
class GangSettings:
    prepare_timeout: timedelta = timedelta(minutes=5)  # silence allowed while preparing
    ports: range = RENDEZVOUS_PORTS
    # A node whose gateway stopped recording heartbeats this long ago is disconnected (the
    # gateway died without closing its streams).
    link_timeout: timedelta = timedelta(seconds=30)
    # Policy: fence a node out of contact this long (None: only an operator fences).
    lost_after: timedelta | None = None
    # A launch aborted for no fault of the job (a coordinator restart, a silent node) queues
    # the job again, at most this many times.
    launch_retries: int = 2


class GangCoordinator:
    def __init__(self, ctx: Context, settings: GangSettings | None = None) -> None:
        self.ctx = ctx
        self.settings = settings or GangSettings()
        # This coordinator's incarnation: an undecided launch begun by another one (that died
        # or lost the lead before deciding) is aborted, never committed (presumed abort).
        self.incarnation = ctx.ids.new("coord")

    async def housekeeping(self) -> None:
        """Mark nodes whose heartbeats stopped disconnected; apply the lost-node policy; record
        the results of pool checks that ended."""
        await settle_checks(self.ctx)
        now = self.ctx.clock.now()
        async with self.ctx.units.nodes() as uow:
            expired = await uow.links.expire(now - self.settings.link_timeout, now)
            await uow.commit()
        if expired:
            log.warning("no heartbeat recorded for %s: marked disconnected", ", ".join(expired))
        if self.settings.lost_after is None:
            return
        async with self.ctx.units.node_fleet() as uow:
            links = {link.node: link for link in await uow.links.all()}
            nodes = await uow.fleet.nodes()
        limit = now - self.settings.lost_after
        for node in nodes:
            link = links.get(node.name)
            if (
                node.connectivity is Connectivity.DISCONNECTED
                and link is not None
                and link.heartbeat_at < limit
            ):
                minutes = self.settings.lost_after.total_seconds() / 60
                await fence_node(
                    self.ctx, node.name, f"out of contact for more than {minutes:g} min (policy)"
                )

    async def step(
        self, job: Job, attempt: Attempt, members: list[Member]
    ) -> dict[str, Observation] | None:
        """Move the launch on. Returns observations for the supervisor to record (member id →
        what its node reported), or None when there is nothing to record this time."""
        async with self.ctx.units.nodes() as uow:
            plan = await uow.launches.plan(attempt.id)
        if plan is None:
            await self._begin(job, attempt, members)
            return None
        if plan.decision is None:
            plan = await self._decide(job, plan)
            if plan.decision is None:
                return None
            if plan.decision is Decision.COMMIT:  # what its members resumed from
                await record_resumed(self.ctx, attempt)
        if plan.decision is Decision.ABORT:
            await self._aborted(job, attempt, plan)
            return None
        return await self._observe(job, attempt, members, plan)

    # -- phase 1: begin ---------------------------------------------------------------------

    async def _begin(self, job: Job, attempt: Attempt, members: list[Member]) -> None:
        now = self.ctx.clock.now()
        async with self.ctx.units.gang() as uow:
            reservation = await uow.reservations.get(attempt.id)
            if reservation is None:
                await self._end(uow, job, attempt, "its reservation is gone", now)
                await uow.commit()
                return
            nodes = {a.member: a.node for a in reservation.assignments}
            epochs = {name: await uow.links.epoch(name) for name in set(nodes.values())}
            master = nodes[0]
            used = await uow.launches.ports_in_use(master)
            port = next(
                (p for p in _ports_from(self.settings.ports, attempt.id) if p not in used), None
            )
            if port is None:
                return  # every rendezvous port of that node is taken: try again next tick
            plan = LaunchPlan(attempt.id, job.id, now, master, port, coordinator=self.incarnation)
            launches = [
                MemberLaunch(m.id, attempt.id, m.index, nodes[m.index], epochs[nodes[m.index]])
                for m in members
            ]
            try:
                await uow.launches.begin(plan, launches)
            except Conflict:
                return  # another coordinator began it
            await uow.commit()
        await self.ctx.signals.notify(NODE_WORK)  # the gateways send Prepare now
        log.info(
            "launch of %s began: %d members, rendezvous %s:%d", job.id, len(members), master, port
        )

    # -- phase 2: decide --------------------------------------------------------------------

    async def _decide(self, job: Job, plan: LaunchPlan) -> LaunchPlan:
        now = self.ctx.clock.now()
        async with self.ctx.units.node_fleet() as uow:
            launches = await uow.launches.members(plan.attempt_id)
            decision, reason, retry = await self._verdict(uow, job, plan, launches, now)
            if decision is None:
                return plan
            if await uow.launches.decide(plan.attempt_id, decision, reason, now, retry):
                await uow.commit()
                await self.ctx.signals.notify(NODE_WORK)  # Commit or Abort goes out now
                log.info("launch of %s: %s (%s)", job.id, decision, reason)
                self.ctx.instruments.observe(
                    i.GANG_PHASE_SECONDS,
                    _seconds(now - plan.began_at),
                    phase="prepare",
                    outcome=str(decision.value),
                )
            current = await uow.launches.plan(plan.attempt_id)
        return current or plan

    async def _verdict(
        self,
        uow: FleetUnit,
        job: Job,
        plan: LaunchPlan,
        launches: list[MemberLaunch],
        now: datetime,
    ) -> tuple[Decision | None, str, bool]:
        """(decision or None to wait, why, whether an abort queues the job again)."""
        if job.state is JobState.STOPPING:
            return Decision.ABORT, "stopped before it started", False
        refused = [m for m in launches if m.vote is False]
        if refused:
            m = refused[0]
            why = f"member {m.index} on node {m.node} refused: {m.vote_reason}"
            return Decision.ABORT, why, all(m.vote_busy for m in refused)
        if plan.coordinator != self.incarnation:
            return Decision.ABORT, "the coordinator changed before deciding (presumed abort)", True
        if launches and all(m.vote for m in launches):
            return Decision.COMMIT, f"all {len(launches)} members prepared", False
        heard = [plan.began_at] + [
            t for m in launches for t in (m.voted_at, m.progress_at, m.reported_at) if t
        ]
        if now - max(heard) <= self.settings.prepare_timeout:
            return None, "", False
        silent = next(m for m in launches if m.vote is None)
        node = await uow.fleet.node(silent.node)
        state = f" (it is {node.connectivity})" if node is not None else ""
        seconds = int(self.settings.prepare_timeout.total_seconds())
        return (
            Decision.ABORT,
            f"member {silent.index} on node {silent.node}{state} did not prepare "
            f"within {seconds} s of the last progress",
            True,
        )

    # -- phase 3a: aborted ------------------------------------------------------------------

    async def _aborted(self, job: Job, attempt: Attempt, plan: LaunchPlan) -> None:
        reason = f"launch aborted: {plan.reason}"
        now = self.ctx.clock.now()
        async with self.ctx.units.placement() as uow:
            requeued = [a for a in await uow.attempts.for_job(job.id) if a.end == REQUEUED]
            again = (
                plan.retry
                and job.state is JobState.STARTING
                and len(requeued) < self.settings.launch_retries
            )
            if again:  # nothing started and nothing was wrong with the job: queue it again
                await self._requeue(uow, job, attempt, reason, now)
            else:
                await self._end(uow, job, attempt, reason, now)
            await uow.commit()

    @staticmethod
    async def _requeue(
        uow: PlacementUnit, job: Job, attempt: Attempt, reason: str, now: datetime
    ) -> None:
        for m in await uow.members.for_attempt(attempt.id):
            if m.state not in MEMBER_FINAL:
                await uow.members.update(
                    m.moved(MemberState.FAILED, now, f"not started: {reason}"), m.state
                )
        if attempt.state not in ATTEMPT_FINAL:
            await uow.attempts.update(
                attempt.moved(AttemptState.FAILED, now, reason, cause=REQUEUED), attempt.state
            )
        text = f"attempt {attempt.number} {reason}; queued again"
        queued = job.moved(JobState.PENDING, now, text)
        await uow.jobs.update(queued, job.state)
        log_moved(job, queued)
        await uow.reservations.release(attempt.id)

    @staticmethod
    async def _end(
        uow: PlacementUnit, job: Job, attempt: Attempt, reason: str, now: datetime
    ) -> None:
        """Nothing started: record every member and the attempt ended, release the envelope."""
        stopping = job.state is JobState.STOPPING
        target = MemberState.STOPPED if stopping else MemberState.FAILED
        for m in await uow.members.for_attempt(attempt.id):
            if m.state not in MEMBER_FINAL:
                await uow.members.update(m.moved(target, now, f"not started: {reason}"), m.state)
        ended = attempt
        if attempt.state not in ATTEMPT_FINAL:
            if stopping:  # a launching attempt is cancelled by way of stopping
                if ended.state is not AttemptState.STOPPING:
                    ended = ended.moved(AttemptState.STOPPING, now, reason)
                ended = ended.moved(AttemptState.CANCELLED, now, reason)
            else:
                ended = ended.moved(AttemptState.FAILED, now, reason, cause=LAUNCH_FAILED)
            await uow.attempts.update(ended, attempt.state)
        j_target = JobState.CANCELLED if stopping else JobState.FAILED
        job_now = job.moved(j_target, now, reason)
        if not stopping:  # its retry policy may start another attempt
            job_now = await retry_or_end(uow, job, job_now, ended, now)
        await uow.jobs.update(job_now, job.state)
        log_moved(job, job_now)
        await uow.reservations.release(attempt.id)

    # -- phase 3b: committed ----------------------------------------------------------------

    async def _observe(
        self, job: Job, attempt: Attempt, members: list[Member], plan: LaunchPlan | None = None
    ) -> dict[str, Observation]:
        now = self.ctx.clock.now()
        async with self.ctx.units.gang() as uow:
            launches = {m.member_id: m for m in await uow.launches.members(attempt.id)}
            connectivity: dict[str, Connectivity] = {}
            for launch in launches.values():
                if launch.node not in connectivity:
                    node = await uow.fleet.node(launch.node)
                    connectivity[launch.node] = (
                        node.connectivity if node is not None else Connectivity.LOST
                    )
            pending = [m for m in members if m.state is MemberState.PENDING]
            for m in pending:  # committed: every member is starting, named by its node
                handle = f"{launches[m.id].node}/{m.id}"
                await uow.members.update(m.moved(MemberState.STARTING, now, handle=handle), m.state)
            stop = _to_stop(job, members)
            if stop:
                await uow.launches.request_stop(stop, now)
            await uow.commit()
        decided = plan.decided_at if plan is not None else None
        if pending and decided is not None:  # once: its members leave pending together
            self.ctx.instruments.observe(
                i.GANG_PHASE_SECONDS, _seconds(now - decided), phase="commit", outcome="starting"
            )
        if stop:
            await self.ctx.signals.notify(NODE_WORK)
        seen: dict[str, Observation] = {}
        for m in members:
            found = launches.get(m.id)
            if m.state not in MEMBER_FINAL and found is not None:
                seen[m.id] = _observation(found, connectivity[found.node])
        return seen


def _seconds(elapsed: timedelta) -> float:
    return max(0.0, elapsed.total_seconds())


def _ports_from(ports: range, attempt_id: str) -> list[int]:
    """The rendezvous ports to try, starting at one drawn from the attempt's id: each attempt
    (a retry after a node refused a port held by a process we do not know of too) starts at
    another, and control planes sharing a host rarely pick the same."""
    start = zlib.crc32(attempt_id.encode()) % len(ports)
    return [*ports[start:], *ports[:start]]


def _to_stop(job: Job, members: list[Member]) -> list[str]:
    """Members to stop: all of a stopping job, the rest of a gang once one member failed, a
    Ray gang's workers once its driver ended."""
    live = [m.id for m in members if m.state not in MEMBER_FINAL]
    if job.state is JobState.STOPPING or any(m.state is MemberState.FAILED for m in members):
        return live
    if driver_ended(members, job.spec.runtime.process_model) is not None:
        return live
    return []


def _observation(launch: MemberLaunch, connectivity: Connectivity) -> Observation:
    phase = launch.phase
    if phase is Phase.EXITED:
        return Observation("exited", launch.exit_code, launch.reason)
    if phase in (Phase.MISSING, Phase.REFUSED, Phase.ABORTED):
        return Observation("missing", reason=launch.reason or f"its node reported it {phase}")
    if connectivity is not Connectivity.CONNECTED:
        return Observation("unknown", reason=f"node {launch.node} is {connectivity}")
    if launch.unaccounted:  # its node does not hold it, and that proves nothing
        return Observation("unknown", reason=launch.unaccounted)
    if phase is Phase.RUNNING:
        return Observation("running")
    return Observation("starting")
