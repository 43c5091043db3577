"""Collector tokens are renewed for runs that outlive them (application/token_renewal.py): a
prepared or started member still placed on its node gets a newer token once less than half the
lifetime is left, once; ended, fenced, released or forgotten members get none."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from application.context import Context, TelemetrySettings
from application.enrollment import NodeIdentity
from application.node_control import Session
from application.token_renewal import due_renewals, renewal_due, with_token
from domain.node_messages import TOKEN_LOST
from domain.node_protocol import MemberRef, Phase, Placed
from domain.telemetry import MemberScope
from tests.application.test_node_agent import order
from tests.support.context import FakeClock, memory_context

pytestmark = pytest.mark.unit

LIFE = timedelta(hours=2)


class Signer:
    """Stands in for the Ed25519 signer (tested in tests/integration/test_telemetry_gateway.py):
    here only who gets a token matters, and for which scope and lifetime."""

    def __init__(self) -> None:
        self.issued: list[tuple[MemberScope, datetime, int]] = []

    async def issue(self, scope: MemberScope, now: datetime, lifetime_seconds: int) -> str:
        self.issued.append((scope, now, lifetime_seconds))
        return f"token-{len(self.issued)}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    base = memory_context(tmp_path, clock=clock)
    return dataclasses.replace(base, tokens=Signer(), telemetry=TelemetrySettings(LIFE))


def session_with(member: str, phase: Phase, expires: datetime, **placed: bool) -> Session:
    ref = MemberRef("att-1", member, 0, 1)
    facts = {"final": False, "stop_requested": False, "released": False, "fenced": False}
    facts.update(placed)
    s = Session("n1", 1, 1, NodeIdentity("n1", "cred-1"))
    s.held[member] = (ref, phase)
    s.placed[member] = Placed(ref, "job-1", "n1", None, **facts)
    s.tokens[member] = expires
    return s


def test_due_when_less_than_half_the_lifetime_is_left(clock: FakeClock) -> None:
    now = clock.now()
    assert not renewal_due(now + LIFE / 2, now, LIFE)
    assert renewal_due(now + LIFE / 2 - timedelta(seconds=1), now, LIFE)
    assert renewal_due(now - timedelta(days=1), now, LIFE)  # expired while the node was away


async def test_a_long_run_gets_one_newer_token_at_half_life(ctx: Context, clock: FakeClock) -> None:
    issued = await with_token(ctx, order(), clock.now())
    assert issued.collector_token == "token-1"
    assert issued.collector_token_expires_at == clock.now() + LIFE
    session = session_with("m0", Phase.RUNNING, clock.now() + LIFE)
    clock.advance(seconds=LIFE.total_seconds() / 2 - 1)
    assert await due_renewals(ctx, [session]) == []
    clock.advance(seconds=2)
    [(to, renewal)] = await due_renewals(ctx, [session])
    assert to is session and renewal.token == "token-2"
    assert renewal.ref == session.held["m0"][0]
    assert renewal.expires_at == clock.now() + LIFE == session.tokens["m0"]
    scope, at, seconds = ctx.tokens.issued[-1]  # type: ignore[union-attr]
    assert (scope, at, seconds) == (
        MemberScope("job-1", "att-1", "m0", 0),
        clock.now(),
        LIFE.total_seconds(),
    )
    assert await due_renewals(ctx, [session]) == []  # sent once


@pytest.mark.parametrize(
    ("phase", "placed"),
    [
        (Phase.EXITED, {}),
        (Phase.MISSING, {}),
        (Phase.RUNNING, {"final": True}),
        (Phase.RUNNING, {"fenced": True}),
        (Phase.RUNNING, {"released": True}),
    ],
)
async def test_members_that_ended_or_are_no_longer_theirs_get_none(
    ctx: Context, clock: FakeClock, phase: Phase, placed: dict[str, bool]
) -> None:
    session = session_with("m0", phase, clock.now(), **placed)
    assert await due_renewals(ctx, [session]) == []
    assert ctx.tokens.issued == []  # type: ignore[union-attr]


async def test_a_forgotten_member_is_dropped_and_no_signer_means_no_tokens(
    ctx: Context, clock: FakeClock
) -> None:
    session = session_with("m0", Phase.RUNNING, clock.now())
    session.held.clear()
    assert await due_renewals(ctx, [session]) == [] and session.tokens == {}
    unsigned = dataclasses.replace(ctx, tokens=None)
    session = session_with("m0", Phase.RUNNING, clock.now())
    assert await due_renewals(unsigned, [session]) == []
    assert (await with_token(unsigned, order(), clock.now())).collector_token == ""


async def test_a_readopted_member_whose_token_was_lost_gets_one_at_once(
    ctx: Context, clock: FakeClock
) -> None:
    """A member re-adopted from its container's labels lost its token with its journal row (a
    secret is never in labels): its row reports ``TOKEN_LOST``, which is due at once."""
    s = session_with("m1", Phase.RUNNING, TOKEN_LOST)
    [(_, renewal)] = await due_renewals(ctx, [s])
    assert renewal.token == "token-1" and renewal.expires_at == clock.now() + LIFE
    assert await due_renewals(ctx, [s]) == []  # once
