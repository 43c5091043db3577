"""Collector tokens renewed for runs that outlive them (docs/telemetry.md, "Collector tokens").

A token is issued with its member's Prepare, for ``TelemetrySettings.token_lifetime``
(``TUNEPLANE_COLLECTOR_TOKEN_SECONDS``). When less than half that lifetime is left on the token
a node holds for a member that is prepared or started — and still placed here, not final,
released or fenced — the node control gateway sends a newer one (``TokenRenewal``); the node
journals it and rewrites its collector's member file, and the collector ships its next stream
with it. The node reports each member's token expiry in every status and in its Hello, so a
renewal lost with a stream is sent again once the node is back.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from application.context import Context
from application.telemetry import collector_token
from domain.node_messages import PrepareOrder, TokenRenewal
from domain.node_protocol import MemberReport, Phase
from domain.telemetry import MemberScope

if TYPE_CHECKING:
    from application.node_control import Session

RENEWABLE = frozenset({Phase.PREPARED, Phase.STARTING, Phase.RUNNING})


def renewal_due(expires_at: datetime, now: datetime, lifetime: timedelta) -> bool:
    """Less than half the lifetime is left (an expired token too: a node away for long)."""
    return expires_at - now < lifetime / 2


async def with_token(ctx: Context, order: PrepareOrder, now: datetime) -> PrepareOrder:
    """The order with a collector token for its member, when this control plane issues them
    (the node hands it to its collector, never to the workload)."""
    if ctx.tokens is None:
        return order
    ref = order.ref
    scope = MemberScope(order.job_id, ref.attempt_id, ref.member_id, ref.index)
    lifetime = ctx.telemetry.token_lifetime
    token = await collector_token(ctx.tokens, scope, now, lifetime)
    return replace(order, collector_token=token, collector_token_expires_at=now + lifetime)


async def due_renewals(ctx: Context, sessions: list[Session]) -> list[tuple[Session, TokenRenewal]]:
    """A newer token for each held, live member whose token is due; the caller sends each over
    its node's stream. Each session remembers the expiry it sent, so nothing is sent twice."""
    if ctx.tokens is None:
        return []
    now = ctx.clock.now()
    lifetime = ctx.telemetry.token_lifetime
    out: list[tuple[Session, TokenRenewal]] = []
    for session in sessions:
        for member_id, expires_at in list(session.tokens.items()):
            held = session.held.get(member_id)
            placed = session.placed.get(member_id)
            if held is None or placed is None:
                session.tokens.pop(member_id, None)  # forgotten
                continue
            ref, phase = held
            live = not (placed.final or placed.released or placed.fenced)
            if phase not in RENEWABLE or not live or not renewal_due(expires_at, now, lifetime):
                continue
            scope = MemberScope(placed.job_id, ref.attempt_id, member_id, ref.index)
            token = await collector_token(ctx.tokens, scope, now, lifetime)
            session.tokens[member_id] = now + lifetime
            out.append((session, TokenRenewal(ref, token, now + lifetime)))
    return out


def token_expiry(session: Session, report: MemberReport) -> None:
    """Remember the expiry of the token the node holds for the member (from its report)."""
    if report.token_expires_at is not None:
        session.tokens[report.ref.member_id] = report.token_expires_at
