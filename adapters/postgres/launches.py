"""The two-phase launch ledger of the node backend: ``launches`` (one row per attempt: the
gang's rendezvous and the decision) and ``member_launches`` (each member's node, epoch, vote,
last reported phase, stop request and release).

Every rule with a single winner is one conditional UPDATE, so concurrent callers (the
coordinator, several gateways) cannot both win:

* ``decide``: ``UPDATE launches … WHERE decision IS NULL``.
* ``vote``: the member's epoch must match, its node must not have been fenced since
  (``nodes.epoch = member_launches.epoch``), no vote recorded, and the launch undecided — the
  launch row is read ``FOR SHARE``, so a vote racing a decision waits for it and then sees it.
* ``report``: the same fencing check, and a phase only moves forward
  (``domain.node_protocol.accepts_phase``, turned into the list of phases it may replace).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from adapters.postgres.reservations import LOCAL_GPUS
from domain.admission import Assignment
from domain.errors import Conflict, InvalidInput
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, MemberState
from domain.node_ports import LaunchPlan, MemberLaunch, NodeWork
from domain.node_protocol import (
    Decision,
    MemberRef,
    MemberReport,
    Phase,
    Placed,
    accepts_phase,
)
from domain.submission import JobSpec

_BEGIN = text(
    "WITH l AS (INSERT INTO launches "
    "           (attempt_id, job_id, began_at, master_node, master_port, coordinator) "
    "           VALUES (:attempt_id, :job_id, :began_at, :master_node, :master_port, "
    "                   :coordinator) "
    "           ON CONFLICT DO NOTHING RETURNING attempt_id), "
    "m AS (INSERT INTO member_launches (member_id, attempt_id, idx, node, epoch) "
    "      SELECT x.member_id, l.attempt_id, x.idx, x.node, x.epoch FROM l CROSS JOIN "
    "             unnest(CAST(:m_id AS text[]), CAST(:m_idx AS int[]), CAST(:m_node AS text[]), "
    "                    CAST(:m_epoch AS bigint[])) AS x(member_id, idx, node, epoch)) "
    "SELECT count(*) FROM l"
)
_PLAN = text("SELECT * FROM launches WHERE attempt_id = :attempt_id")
_MEMBERS = text("SELECT * FROM member_launches WHERE attempt_id = :attempt_id ORDER BY idx")
_DECIDE = text(
    "UPDATE launches SET decision = :decision, decided_at = :now, reason = :reason, "
    "retry = :retry "
    "WHERE attempt_id = :attempt_id AND decision IS NULL RETURNING attempt_id"
)
# the member's node still has the member's epoch: not fenced since it was placed
_NOT_FENCED = "n.name = ml.node AND n.epoch = ml.epoch AND ml.epoch = :epoch"
_VOTE = text(
    "WITH l AS (SELECT la.attempt_id FROM launches la JOIN member_launches x "
    "           ON x.attempt_id = la.attempt_id "
    "           WHERE x.member_id = :member_id AND la.decision IS NULL FOR SHARE OF la) "
    "UPDATE member_launches ml SET vote = :yes, vote_reason = :reason, vote_busy = :busy, "
    "voted_at = :now, "
    "engine = :engine "
    "FROM l, nodes n "
    "WHERE ml.member_id = :member_id AND ml.attempt_id = l.attempt_id AND ml.vote IS NULL "
    f"AND {_NOT_FENCED} RETURNING ml.member_id"
)
_REPORT = text(
    "UPDATE member_launches ml SET phase = :phase, exit_code = :exit_code, reason = :reason, "
    "reported_at = :at FROM nodes n "
    "WHERE ml.member_id = :member_id AND ml.attempt_id = :attempt_id AND ml.idx = :idx "
    f"AND {_NOT_FENCED} "
    "AND (ml.phase IS NULL OR ml.phase = ANY(CAST(:replaces AS text[]))) "
    "RETURNING ml.member_id"
)
_ACCOUNT = text(
    "UPDATE member_launches ml SET unaccounted = :why FROM nodes n "
    f"WHERE ml.member_id = :member_id AND {_NOT_FENCED} RETURNING ml.member_id"
)
_PROGRESS = text(
    "UPDATE member_launches ml SET progress = :text, progress_at = :now FROM nodes n "
    f"WHERE ml.member_id = :member_id AND {_NOT_FENCED} RETURNING ml.member_id"
)
_REQUEST_STOP = text(
    "UPDATE member_launches SET stop_requested_at = :now "
    "WHERE member_id = ANY(CAST(:ids AS text[])) AND stop_requested_at IS NULL"
)
_RELEASE = text(
    "UPDATE member_launches SET released_at = :now "
    "WHERE member_id = ANY(CAST(:ids AS text[])) AND node = :node AND released_at IS NULL"
)
_ON_NODES = text(
    "SELECT ml.*, l.job_id, l.master_port, l.decision, m.state AS member_state, m.role, "
    "j.spec, n.epoch AS node_epoch, coalesce(mn.address, '') AS master_addr, "
    "(SELECT a.number FROM attempts a WHERE a.id = ml.attempt_id) AS attempt_number, "
    "(SELECT count(*) FROM member_launches g WHERE g.attempt_id = ml.attempt_id) AS gang, "
    "ARRAY(SELECT coalesce(pn.address, '') FROM member_launches p "
    "      LEFT JOIN nodes pn ON pn.name = p.node "
    "      WHERE p.attempt_id = ml.attempt_id ORDER BY p.idx) AS peers, "
    "rm.node AS r_node, rm.role AS r_role, rm.mcpu AS r_mcpu, rm.memory_mb AS r_memory_mb, "
    f"{LOCAL_GPUS.format(t='rm')} AS r_gpus "
    "FROM member_launches ml "
    "JOIN launches l ON l.attempt_id = ml.attempt_id "
    "JOIN members m ON m.id = ml.member_id "
    "JOIN jobs j ON j.id = l.job_id "
    "JOIN nodes n ON n.name = ml.node "
    "LEFT JOIN nodes mn ON mn.name = l.master_node "
    "LEFT JOIN reservation_members rm ON rm.attempt_id = ml.attempt_id AND rm.member = ml.idx "
    "WHERE ml.released_at IS NULL AND ml.node = ANY(CAST(:nodes AS text[])) "
    'ORDER BY ml.node COLLATE "C", ml.attempt_id COLLATE "C", ml.idx'
)
# the same rows for the nodes whose link is open at one gateway: a join instead of an array of
# 10,000 names, which asyncpg encoded in one piece of several ms at each pass of the gateway
_ON_GATEWAY = text(
    _ON_NODES.text.replace(
        "ml.node = ANY(CAST(:nodes AS text[]))",
        "EXISTS (SELECT 1 FROM node_links nl WHERE nl.node = ml.node "
        "AND nl.gateway = :gateway AND nl.closed_at IS NULL)",
    )
)
_PORTS = text(
    "SELECT l.master_port FROM launches l JOIN attempts a ON a.id = l.attempt_id "
    "WHERE l.master_node = :node AND (l.decision IS NULL OR l.decision = 'commit') "
    "AND NOT (a.state = ANY(CAST(:final AS text[])))"
)
_ATTEMPT_FINAL = sorted(s.value for s in ATTEMPT_FINAL)
_MEMBER_FINAL = frozenset(MEMBER_FINAL)
# for each reported phase, the recorded phases it may replace
_REPLACES = {reported: [p.value for p in Phase if accepts_phase(p, reported)] for reported in Phase}


def _plan(r: Any) -> LaunchPlan:
    return LaunchPlan(
        attempt_id=r["attempt_id"],
        job_id=r["job_id"],
        began_at=r["began_at"],
        master_node=r["master_node"],
        master_port=r["master_port"],
        decision=Decision(r["decision"]) if r["decision"] is not None else None,
        decided_at=r["decided_at"],
        reason=r["reason"],
        coordinator=r["coordinator"],
        retry=r["retry"],
    )


def _member(r: Any) -> MemberLaunch:
    return MemberLaunch(
        member_id=r["member_id"],
        attempt_id=r["attempt_id"],
        index=r["idx"],
        node=r["node"],
        epoch=r["epoch"],
        vote=r["vote"],
        vote_reason=r["vote_reason"],
        vote_busy=r["vote_busy"],
        voted_at=r["voted_at"],
        phase=Phase(r["phase"]) if r["phase"] is not None else None,
        exit_code=r["exit_code"],
        reason=r["reason"],
        reported_at=r["reported_at"],
        progress=r["progress"],
        progress_at=r["progress_at"],
        stop_requested_at=r["stop_requested_at"],
        released_at=r["released_at"],
        engine=r["engine"],
        unaccounted=r["unaccounted"],
    )


def _work(r: Any) -> NodeWork:
    launch = _member(r)
    decision = Decision(r["decision"]) if r["decision"] is not None else None
    placed = Placed(
        ref=MemberRef(launch.attempt_id, launch.member_id, launch.index, launch.epoch),
        job_id=r["job_id"],
        node=launch.node,
        decision=decision,
        final=MemberState(r["member_state"]) in _MEMBER_FINAL,
        stop_requested=launch.stop_requested_at is not None,
        released=launch.released_at is not None,
        fenced=launch.epoch < r["node_epoch"],
    )
    if r["r_node"] is not None:
        assignment = Assignment(
            launch.index,
            r["r_role"],
            r["r_node"],
            tuple(r["r_gpus"]),
            r["r_mcpu"],
            r["r_memory_mb"],
        )
    else:  # the reservation was released: only a Forget can still be due
        assignment = Assignment(launch.index, r["role"], launch.node, (), 0, 0)
    return NodeWork(
        placed=placed,
        launch=launch,
        spec=JobSpec.from_dict(r["spec"]),
        assignment=assignment,
        members=r["gang"],
        master_addr=r["master_addr"],
        master_port=r["master_port"],
        peers=tuple(r["peers"]),
        attempt=r["attempt_number"] or 1,
    )


def check_members(plan: LaunchPlan, members: Sequence[MemberLaunch]) -> None:
    """Every member launch must belong to the plan's attempt."""
    for m in members:
        if m.attempt_id != plan.attempt_id:
            raise InvalidInput(
                f"member {m.member_id} belongs to attempt {m.attempt_id}, not {plan.attempt_id}",
                fix="begin each attempt's launch with its own members",
                field="members",
            )


class PostgresLaunchLedger:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def begin(self, plan: LaunchPlan, members: Sequence[MemberLaunch]) -> None:
        check_members(plan, members)
        ordered = sorted(members, key=lambda m: m.index)
        params = {
            "attempt_id": plan.attempt_id,
            "job_id": plan.job_id,
            "began_at": plan.began_at,
            "master_node": plan.master_node,
            "master_port": plan.master_port,
            "coordinator": plan.coordinator,
            "m_id": [m.member_id for m in ordered],
            "m_idx": [m.index for m in ordered],
            "m_node": [m.node for m in ordered],
            "m_epoch": [m.epoch for m in ordered],
        }
        with translated(f"begin the launch of attempt {plan.attempt_id}"):
            began = (await self._conn.execute(_BEGIN, params)).scalar()
        if not began:
            raise Conflict(
                f"attempt {plan.attempt_id} already has a launch",
                fix="re-read the launch and go on from its state",
            )

    async def plan(self, attempt_id: str) -> LaunchPlan | None:
        with translated(f"get the launch of attempt {attempt_id}"):
            row = (await self._conn.execute(_PLAN, {"attempt_id": attempt_id})).mappings().first()
        return _plan(row) if row else None

    async def members(self, attempt_id: str) -> builtins.list[MemberLaunch]:
        with translated(f"get the member launches of attempt {attempt_id}"):
            rows = (await self._conn.execute(_MEMBERS, {"attempt_id": attempt_id})).mappings()
            return [_member(r) for r in rows.all()]

    async def decide(
        self, attempt_id: str, decision: Decision, reason: str, now: datetime, retry: bool = False
    ) -> bool:
        params = {
            "attempt_id": attempt_id,
            "decision": Decision(decision).value,
            "reason": reason,
            "now": now,
            "retry": retry and decision is Decision.ABORT,
        }
        with translated(f"record the launch decision of attempt {attempt_id}"):
            done = (await self._conn.execute(_DECIDE, params)).first()
        return done is not None

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
        params = {
            "member_id": member_id,
            "epoch": epoch,
            "yes": yes,
            "reason": reason,
            "now": now,
            "engine": engine if yes else "",
            "busy": busy and not yes,
        }
        with translated(f"record the vote of member {member_id}"):
            done = (await self._conn.execute(_VOTE, params)).first()
        return done is not None

    async def account(self, member_id: str, epoch: int, why: str, now: datetime) -> bool:
        params = {"member_id": member_id, "epoch": epoch, "why": why}
        with translated(f"record whether node accounts for member {member_id}"):
            done = (await self._conn.execute(_ACCOUNT, params)).first()
        return done is not None

    async def report(self, member_id: str, report: MemberReport, now: datetime) -> bool:
        phase = Phase(report.phase)
        params = {
            "member_id": member_id,
            "attempt_id": report.ref.attempt_id,
            "idx": report.ref.index,
            "epoch": report.ref.epoch,
            "phase": phase.value,
            "exit_code": report.exit_code,
            "reason": report.reason,
            "at": report.at or now,
            "replaces": _REPLACES[phase],
        }
        with translated(f"record the phase of member {member_id}"):
            done = (await self._conn.execute(_REPORT, params)).first()
        return done is not None

    async def progress(self, member_id: str, epoch: int, text: str, now: datetime) -> bool:
        params = {"member_id": member_id, "epoch": epoch, "text": text, "now": now}
        with translated(f"record the progress of member {member_id}"):
            done = (await self._conn.execute(_PROGRESS, params)).first()
        return done is not None

    async def request_stop(self, member_ids: Collection[str], now: datetime) -> None:
        if member_ids:
            with translated("request members to stop"):
                await self._conn.execute(_REQUEST_STOP, {"ids": sorted(member_ids), "now": now})

    async def release(self, node: str, member_ids: Collection[str], now: datetime) -> None:
        if member_ids:
            params = {"ids": sorted(member_ids), "node": node, "now": now}
            with translated("release member launches"):
                await self._conn.execute(_RELEASE, params)

    async def on_nodes(self, nodes: Collection[str]) -> builtins.list[NodeWork]:
        if not nodes:
            return []
        with translated("read the work of nodes"):
            rows = (await self._conn.execute(_ON_NODES, {"nodes": list(nodes)})).mappings()
            return [_work(r) for r in rows.all()]

    async def on_gateway(self, gateway: str) -> builtins.list[NodeWork]:
        with translated("read the work of this gateway's nodes"):
            rows = (await self._conn.execute(_ON_GATEWAY, {"gateway": gateway})).mappings()
            return [_work(r) for r in rows.all()]

    async def ports_in_use(self, node: str) -> set[int]:
        params = {"node": node, "final": _ATTEMPT_FINAL}
        with translated(f"list the rendezvous ports in use on node {node}"):
            ports = (await self._conn.execute(_PORTS, params)).scalars().all()
        return set(ports)
