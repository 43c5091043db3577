"""The node gateway's command pass (``NodeControl.commands``): for every connected node, in one
database round trip, the command each of its members needs (``domain.node_protocol.command_for``;
a copy of a member on another engine gets ``copy_command``), an unanswered one sent again only
after ``resend_after`` (every command is idempotent on the node), stops before starts. A Forget
releases the member's hold on its node in the ledger.

The gateway's pass is incremental (``due``): the ledger is read for every node whose link is open
at this gateway (a join on ``node_links``, not an array of 10,000 names), but the Python work is
done only for the sessions that can need a command: those with work in the ledger, those that hold,
have placed or hold a token for a member (``busy``), and those ``Attention`` was called to (a new
session, a message recorded). An idle session (most of a large fleet) costs nothing per pass. Long
loops yield to the event loop every ``SLICE`` sessions, so heartbeats are answered in between
(docs/node-backend.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from application.context import Context
from application.node_absence import engine_of, foreign, owner_of
from application.node_checkpoints import with_resume
from application.node_orders import prepare_order
from application.token_renewal import with_token
from domain.node_messages import PrepareOrder
from domain.node_ports import NodeWork
from domain.node_protocol import Command, CommandKind, command_for, copy_command

if TYPE_CHECKING:
    from application.node_control import Session


SLICE = 500  # sessions handled between two yields to the event loop


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One command for a node: ``order`` is set for Prepare."""

    command: Command
    order: PrepareOrder | None = None


def busy(session: Session) -> bool:
    """Whether the session holds, has placed, or holds a token for a member (else idle)."""
    return bool(session.held or session.placed or session.launches or session.tokens)


class Attention:
    """The sessions the incremental pass looks at besides those with work in the ledger: busy
    ones, and those something happened to since the last pass (``add``). One per gateway."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def add(self, session: Session) -> None:
        """Look at ``session`` in the next pass (an older session of its node never replaces a
        newer one: one may open while a pass over the older is under way)."""
        current = self._sessions.get(session.node)
        if current is None or current.number <= session.number:
            self._sessions[session.node] = session

    def drop(self, session: Session) -> None:
        """The session ended (a newer one of its node keeps its place)."""
        if self._sessions.get(session.node) is session:
            del self._sessions[session.node]

    def nodes(self) -> set[str]:
        return set(self._sessions)

    def settle(self, sessions: list[Session]) -> None:
        """After a pass over ``sessions``: the idle ones need no more attention. Judged on their
        state now, so what a message changed during the pass is looked at again next time."""
        for session in sessions:
            if busy(session):
                self.add(session)
                continue
            current = self._sessions.get(session.node)
            if current is not None and current.number <= session.number:
                del self._sessions[session.node]  # idle (an older, ended session with it)

    def live(self, sessions: Mapping[str, Session]) -> list[Session]:
        """The busy and attended sessions among ``sessions`` (live ones, by node)."""
        return [s for n in sorted(self._sessions) if (s := sessions.get(n)) is not None]


async def due(
    ctx: Context,
    resend_after: timedelta,
    live: Mapping[str, Session],
    attention: Attention,
    gateway: str,
) -> dict[str, list[Outgoing]]:
    """The incremental pass over the live sessions (by node) of ``gateway``: ``commands`` for
    those that can need one (see the module). The ledger is read for the nodes whose link is
    open at this gateway (a join, not an array of every node), then for the attended sessions
    the join did not cover (a session whose link row another gateway took, until the heartbeat
    flush ends it: few), so every session looked at sees its node's whole ledger."""
    if not live:
        return {}
    names = attention.nodes()
    async with ctx.units.nodes() as uow:
        works = {n: w for n, w in _by_node(await uow.launches.on_gateway(gateway)).items()
                 if n in live}  # fmt: skip
        rest = sorted(n for n in names if n in live and n not in works)
        if rest:
            works.update(_by_node(await uow.launches.on_nodes(rest)))
    names.update(works)
    sessions = [s for n in sorted(names) if (s := live.get(n)) is not None]
    out = await commands(ctx, resend_after, sessions, works)
    attention.settle(sessions)
    return out


async def commands(
    ctx: Context,
    resend_after: timedelta,
    sessions: list[Session],
    works: dict[str, list[NodeWork]] | None = None,
) -> dict[str, list[Outgoing]]:
    """What each node must be told now, by node name. One database round trip (none when
    ``works``, the ledger's work on these nodes by node, was read already)."""
    if works is None:
        works = await refresh(ctx, sessions)
    else:
        await _keep(works, sessions)
    now = ctx.clock.now()
    out: dict[str, list[Outgoing]] = {}
    released: dict[str, list[str]] = {}
    for n, session in enumerate(sessions):
        if n % SLICE == SLICE - 1:
            await asyncio.sleep(0)  # heartbeats are answered in between
        if not session.held and session.node not in works:
            continue  # nothing placed on it, nothing held: nothing to say (most nodes)
        todo: list[Outgoing] = []
        known = set()
        copies: set[str] = set()  # members whose copy here belongs to another engine
        for work in works.get(session.node, []):
            mid = work.placed.ref.member_id
            known.add(mid)
            held = session.held.get(mid)
            phase = held[1] if held else None
            if foreign(session, mid) is None:
                cmd = command_for(work.placed, phase, work.placed.ref)
            else:
                copies.add(mid)
                owner = owner_of(session, mid)
                cmd = copy_command(phase, work.placed.ref, engine_of(session), owner)
            if cmd is not None and _due(session, mid, cmd.kind, now, resend_after):
                order = None
                if cmd.kind is CommandKind.PREPARE:
                    order = await with_token(ctx, prepare_order(work), now)
                    order = await with_resume(ctx, order)
                    if order.collector_token_expires_at is not None:
                        session.tokens[mid] = order.collector_token_expires_at
                todo.append(Outgoing(cmd, order))
        for mid, (ref, phase) in list(session.held.items()):
            if mid in known:
                continue
            cmd = command_for(None, phase, ref)
            if cmd is not None and _due(session, mid, cmd.kind, now, resend_after):
                todo.append(Outgoing(cmd))
        for item in todo:
            if item.command.kind is CommandKind.FORGET:
                mid = item.command.ref.member_id
                session.held.pop(mid, None)
                if mid not in copies:  # forgetting a copy releases nothing of the member
                    released.setdefault(session.node, []).append(mid)
        todo.sort(key=lambda o: _ORDER[o.command.kind])  # stops before starts
        if todo:
            out[session.node] = todo
    if released:
        async with ctx.units.nodes() as uow:
            for node, member_ids in released.items():
                await uow.launches.release(node, member_ids, now)
            await uow.commit()
    return out


def _due(
    session: Session, member_id: str, kind: CommandKind, now: datetime, resend_after: timedelta
) -> bool:
    last = session.sent.get(member_id)
    if last is not None and last[0] is kind and now - last[1] < resend_after:
        return False
    session.sent[member_id] = (kind, now)
    return True


async def refresh(ctx: Context, sessions: list[Session]) -> dict[str, list[NodeWork]]:
    """The ledger's work on these sessions' nodes, by node; each session keeps its own."""
    async with ctx.units.nodes() as uow:
        found = await uow.launches.on_nodes([s.node for s in sessions])
    works = _by_node(found)
    await _keep(works, sessions)
    return works


def _by_node(found: list[NodeWork]) -> dict[str, list[NodeWork]]:
    works: dict[str, list[NodeWork]] = {}
    for work in found:
        works.setdefault(work.placed.node, []).append(work)
    return works


async def _keep(works: dict[str, list[NodeWork]], sessions: list[Session]) -> None:
    """Each session keeps its node's work (placed members, the ledger's rows)."""
    for n, session in enumerate(sessions):
        if n % SLICE == SLICE - 1:
            await asyncio.sleep(0)
        mine = works.get(session.node, [])
        if not mine and not session.placed and not session.launches:
            continue  # idle before, idle now
        session.placed = {w.placed.ref.member_id: w.placed for w in mine}
        session.launches = {w.placed.ref.member_id: w.launch for w in mine}


_ORDER = {
    CommandKind.FORGET: 0,
    CommandKind.STOP: 1,
    CommandKind.ABORT: 2,
    CommandKind.COMMIT: 3,
    CommandKind.PREPARE: 4,
}
