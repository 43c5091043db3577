"""In-memory two-phase launch ledger (same contract as adapters/postgres/launches.py).

Each conditional write takes the row lock of what it changes, then re-reads and re-checks,
as PostgreSQL's UPDATE … WHERE does after waiting for a concurrent writer; a vote also locks
its launch's row first (PostgreSQL reads it ``FOR SHARE``), so it cannot slip in beside a
decision being recorded.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime

from adapters.memory.db import Tx
from adapters.memory.nodes import node_extra
from domain.admission import Assignment, Reservation
from domain.errors import Conflict, InvalidInput, NotFound
from domain.jobs import Attempt, Job, Member
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL
from domain.node_ports import LaunchPlan, MemberLaunch, NodeLink, NodeWork
from domain.node_protocol import Decision, MemberRef, MemberReport, Placed, accepts_phase


def check_members(plan: LaunchPlan, members: Sequence[MemberLaunch]) -> None:
    """Every member launch must belong to the plan's attempt."""
    for m in members:
        if m.attempt_id != plan.attempt_id:
            raise InvalidInput(
                f"member {m.member_id} belongs to attempt {m.attempt_id}, not {plan.attempt_id}",
                fix="begin each attempt's launch with its own members",
                field="members",
            )


class MemoryLaunchLedger:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def begin(self, plan: LaunchPlan, members: Sequence[MemberLaunch]) -> None:
        tx = self._tx
        check_members(plan, members)
        if tx.get("attempts", plan.attempt_id) is None:
            raise NotFound(f"attempt {plan.attempt_id} does not exist", fix="create it first")
        for m in members:
            if tx.get("members", m.member_id) is None:
                raise NotFound(f"member {m.member_id} does not exist", fix="create it first")
        await tx.lock(("launches", "pk", plan.attempt_id))  # waits for a racing begin
        if tx.get("launches", plan.attempt_id) is not None:
            raise Conflict(
                f"attempt {plan.attempt_id} already has a launch",
                fix="re-read the launch and go on from its state",
            )
        # a launch begins undecided, its members with nothing heard yet
        tx.write("launches", replace(plan, decision=None, decided_at=None, reason="", retry=False))
        for m in sorted(members, key=lambda m: m.index):
            fresh = MemberLaunch(m.member_id, m.attempt_id, m.index, m.node, m.epoch)
            await tx.insert("member_launches", fresh, f"the launch of member {m.member_id}")

    async def plan(self, attempt_id: str) -> LaunchPlan | None:
        found: LaunchPlan | None = self._tx.get("launches", attempt_id)
        return found

    async def members(self, attempt_id: str) -> builtins.list[MemberLaunch]:
        # indexes are 0, 1, … per attempt: probe the unique (attempt, index) key, no scan
        rows: list[MemberLaunch] = []
        while (m := self._tx.find("member_launches", "index", (attempt_id, len(rows)))) is not None:
            rows.append(m)
        return rows

    async def decide(
        self, attempt_id: str, decision: Decision, reason: str, now: datetime, retry: bool = False
    ) -> bool:
        tx = self._tx
        await tx.lock(("launches", "pk", attempt_id))
        plan: LaunchPlan | None = tx.get("launches", attempt_id)
        if plan is None or plan.decision is not None:
            return False
        decided = Decision(decision)
        retry = retry and decided is Decision.ABORT
        tx.write(
            "launches",
            replace(plan, decision=decided, decided_at=now, reason=reason, retry=retry),
        )
        return True

    async def _locked(self, member_id: str) -> MemberLaunch | None:
        await self._tx.lock(("member_launches", "pk", member_id))
        found: MemberLaunch | None = self._tx.get("member_launches", member_id)
        return found

    def _current(self, m: MemberLaunch, epoch: int) -> bool:
        """The epoch matches and the member's node was not fenced since it was placed."""
        return m.epoch == epoch and node_extra(self._tx, m.node).epoch == m.epoch

    async def vote(
        self,
        member_id: str,
        epoch: int,
        yes: bool,
        reason: str,
        now: datetime,
        engine: str = "",
        busy: bool = False,
    ) -> bool:
        tx = self._tx
        seen: MemberLaunch | None = tx.get("member_launches", member_id)
        if seen is None:
            return False
        await tx.lock(("launches", "pk", seen.attempt_id))
        plan: LaunchPlan | None = tx.get("launches", seen.attempt_id)
        m = await self._locked(member_id)
        if plan is None or plan.decision is not None or m is None:
            return False
        if m.vote is not None or not self._current(m, epoch):
            return False
        voted = replace(
            m,
            vote=yes,
            vote_reason=reason,
            vote_busy=busy and not yes,
            voted_at=now,
            engine=engine if yes else "",
        )
        tx.write("member_launches", voted)
        return True

    async def account(self, member_id: str, epoch: int, why: str, now: datetime) -> bool:
        m = await self._locked(member_id)
        if m is None or not self._current(m, epoch):
            return False
        self._tx.write("member_launches", replace(m, unaccounted=why))
        return True

    async def report(self, member_id: str, report: MemberReport, now: datetime) -> bool:
        m = await self._locked(member_id)
        ref = report.ref
        if (
            m is None
            or m.attempt_id != ref.attempt_id
            or m.index != ref.index
            or not self._current(m, ref.epoch)
            or not accepts_phase(m.phase, report.phase)
        ):
            return False
        recorded = replace(
            m,
            phase=report.phase,
            exit_code=report.exit_code,
            reason=report.reason,
            reported_at=report.at or now,
        )
        self._tx.write("member_launches", recorded)
        return True

    async def progress(self, member_id: str, epoch: int, text: str, now: datetime) -> bool:
        m = await self._locked(member_id)
        if m is None or not self._current(m, epoch):
            return False
        self._tx.write("member_launches", replace(m, progress=text, progress_at=now))
        return True

    async def request_stop(self, member_ids: Collection[str], now: datetime) -> None:
        for member_id in sorted(set(member_ids)):
            m = await self._locked(member_id)
            if m is not None and m.stop_requested_at is None:
                self._tx.write("member_launches", replace(m, stop_requested_at=now))

    async def release(self, node: str, member_ids: Collection[str], now: datetime) -> None:
        for member_id in sorted(set(member_ids)):
            m = await self._locked(member_id)
            if m is not None and m.node == node and m.released_at is None:
                self._tx.write("member_launches", replace(m, released_at=now))

    async def on_gateway(self, gateway: str) -> builtins.list[NodeWork]:
        links: list[NodeLink] = self._tx.select(
            "node_links", lambda r: r.gateway == gateway and r.closed_at is None
        )
        return await self.on_nodes([r.node for r in links])

    async def on_nodes(self, nodes: Collection[str]) -> builtins.list[NodeWork]:
        tx = self._tx
        wanted = set(nodes)
        found: list[MemberLaunch] = tx.select(
            "member_launches", lambda m: m.node in wanted and m.released_at is None
        )
        gangs: dict[str, int] = {}
        peers: dict[str, tuple[str, ...]] = {}
        works = []
        for launch in sorted(found, key=lambda m: (m.node, m.attempt_id, m.index)):
            plan: LaunchPlan | None = tx.get("launches", launch.attempt_id)
            member: Member | None = tx.get("members", launch.member_id)
            job: Job | None = tx.get("jobs", plan.job_id) if plan is not None else None
            node = tx.get("nodes", launch.node)
            attempt: Attempt | None = tx.get("attempts", launch.attempt_id)
            if plan is None or member is None or job is None or node is None:
                continue  # as the inner joins of the PostgreSQL query
            if launch.attempt_id not in gangs:
                gang = await self.members(launch.attempt_id)
                gangs[launch.attempt_id] = len(gang)
                peers[launch.attempt_id] = tuple(
                    node_extra(tx, m.node).address for m in sorted(gang, key=lambda m: m.index)
                )
            placed = Placed(
                ref=MemberRef(launch.attempt_id, launch.member_id, launch.index, launch.epoch),
                job_id=plan.job_id,
                node=launch.node,
                decision=plan.decision,
                final=member.state in MEMBER_FINAL,
                stop_requested=launch.stop_requested_at is not None,
                released=launch.released_at is not None,
                fenced=launch.epoch < node_extra(tx, launch.node).epoch,
            )
            master = node_extra(tx, plan.master_node).address  # "" when absent, as in SQL
            works.append(
                NodeWork(
                    placed=placed,
                    launch=launch,
                    spec=job.spec,
                    assignment=self._assignment(launch, member),
                    members=gangs[launch.attempt_id],
                    master_addr=master,
                    master_port=plan.master_port,
                    peers=peers[launch.attempt_id],
                    attempt=attempt.number if attempt is not None else 1,
                )
            )
        return works

    def _assignment(self, launch: MemberLaunch, member: Member) -> Assignment:
        reservation: Reservation | None = self._tx.get("reservations", launch.attempt_id)
        if reservation is not None:
            for a in reservation.assignments:
                if a.member == launch.index:
                    return a
        # the reservation was released: only a Forget can still be due
        return Assignment(launch.index, member.role, launch.node, (), 0, 0)

    async def ports_in_use(self, node: str) -> set[int]:
        tx = self._tx
        plans: list[LaunchPlan] = tx.select(
            "launches",
            lambda p: p.master_node == node and p.decision in (None, Decision.COMMIT),
        )
        ports = set()
        for p in plans:
            attempt: Attempt | None = tx.get("attempts", p.attempt_id)
            if attempt is not None and attempt.state not in ATTEMPT_FINAL:
                ports.add(p.master_port)
        return ports
