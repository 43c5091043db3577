"""What a node's silence proves (issue 18, defect 1): the gateway's side of "a member is declared
ended only on proof".

A node's Hello (or a later Inventory) carries its whole journal and a full scan of its container
engine (``EngineScan``), every labelled container the journal lacked re-adopted into it first.
A committed member the node does not hold is recorded gone (``Phase.MISSING``) only when that
scan is complete and of the very engine the member was prepared on (recorded with its yes
vote); otherwise the member is *unaccounted*: the ledger keeps why (``MemberLaunch.unaccounted``)
and the coordinator observes it ``unknown`` — its gang runs on, its reservation stays held —
until the right engine accounts for it again or an operator fences the node. A ``MISSING``
report from a node's journal gets the same engine check. Rules: ``domain.node_protocol``
(``absence_unproven``, ``missing_unproven``); docs/node-backend.md, "Proof of end".
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from application.context import Context
from application.token_renewal import token_expiry
from domain.node_protocol import (
    Decision,
    EngineScan,
    MemberRef,
    MemberReport,
    Phase,
    absence_unproven,
    missing_unproven,
    not_its_engine,
    not_proof,
    refusal,
)

if TYPE_CHECKING:
    from application.node_control import NodeControl, Session

log = logging.getLogger("tuneplane.gateway")


def engine_of(session: Session) -> str:
    """The container engine the node's last scan named ("" if none)."""
    return session.scan.engine if session.scan is not None else ""


def owner_of(session: Session, member_id: str) -> str:
    """The engine the member was prepared on, as the ledger recorded it ("" if none yet)."""
    launch = session.launches.get(member_id)
    return launch.engine if launch is not None else ""


def foreign(session: Session, member_id: str) -> str | None:
    """Why this session's daemon must neither act nor speak for the member (it belongs to
    another engine), or None."""
    return not_its_engine(owner_of(session, member_id), session.scan, member_id)


async def reconcile(
    control: NodeControl,
    session: Session,
    journal: tuple[MemberReport, ...],
    scan: EngineScan | None,
) -> None:
    """What the node holds (its whole journal) and what its engine scan found: record each
    member's news, then what the node's silence about the others proves."""
    session.scan = scan
    for report in journal:
        session.held[report.ref.member_id] = (report.ref, report.phase)
        token_expiry(session, report)
        mid = report.ref.member_id
        if refusal(session.placed.get(mid), report.ref, session.node) is not None:
            continue
        why = foreign(session, mid)
        if why is not None:  # a copy on another engine (or an engine it cannot name)
            await unaccounted(control.ctx, session, report.ref, not_proof(session.node, why))
        else:
            if report.phase in (Phase.PREPARED, Phase.REFUSED):  # a vote the stream lost
                yes = report.phase is Phase.PREPARED
                await control.vote_for(report.ref, yes, report.reason, engine_of(session))
            await control._report(session, report)
    await _absent(control, session)


async def _absent(control: NodeControl, session: Session) -> None:
    """Committed members the node does not hold: gone only on proof, else unaccounted."""
    for placed in session.placed.values():
        mid = placed.ref.member_id
        if (
            mid in session.held
            or placed.decision is not Decision.COMMIT
            or placed.final
            or placed.fenced
        ):
            continue
        launch = session.launches.get(mid)
        why = absence_unproven(session.scan, launch.engine if launch else "", mid, session.node)
        if why is not None:
            await unaccounted(control.ctx, session, placed.ref, why)
            continue
        gone = (
            f"gone: a full scan of node {session.node}'s container engine found no container of it"
        )
        await control._report(session, MemberReport(placed.ref, Phase.MISSING, None, gone))


async def record_report(ctx: Context, session: Session, report: MemberReport) -> None:
    """Record a node's report of a member it holds (it accounts for the member again); a
    ``MISSING`` one only when it comes from the engine the member was prepared on."""
    mid = report.ref.member_id
    launch = session.launches.get(mid)
    if report.phase is Phase.MISSING:
        why = missing_unproven(session.scan, launch.engine if launch else "", session.node)
        if why is not None:
            await unaccounted(ctx, session, report.ref, why)
            return
    now = ctx.clock.now()
    async with ctx.units.nodes() as uow:
        await uow.launches.report(mid, report, now)
        if launch is not None and launch.unaccounted:  # its node holds it again
            await uow.launches.account(mid, report.ref.epoch, "", now)
        await uow.commit()
    if launch is not None and launch.unaccounted:
        session.launches[mid] = replace(launch, unaccounted="")
        log.info("node %s accounts for member %s again", session.node, mid)


async def unaccounted(ctx: Context, session: Session, ref: MemberRef, why: str) -> None:
    """Record that the node does not account for the member: ``unknown``, never ended, on
    this alone. Written once per reason."""
    launch = session.launches.get(ref.member_id)
    if launch is None or launch.unaccounted == why:
        return
    async with ctx.units.nodes() as uow:
        await uow.launches.account(ref.member_id, ref.epoch, why, ctx.clock.now())
        await uow.commit()
    session.launches[ref.member_id] = replace(launch, unaccounted=why)
    log.warning("member %s: %s", ref.member_id, why)
