"""Two admins revoke the last two admin tokens at once on PostgreSQL (issue 24): the
revocations take turns (the live admin tokens are locked), so one wins and the other is
refused as the last one; an admin is always left who can sign in."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from application import tokens
from application.auth import authenticate, bootstrap_admin
from domain.errors import Conflict
from tests.support.context import memory_context

pytestmark = pytest.mark.integration


async def test_racing_revocations_leave_one_admin_token(
    tmp_path: Path, pg_engine: AsyncEngine
) -> None:
    ctx = dataclasses.replace(memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine))
    first = await bootstrap_admin(ctx)
    assert first is not None
    me = await authenticate(ctx, first)
    second = await tokens.create(ctx, me, "admin", label="second")
    him = await authenticate(ctx, second.secret)
    # each revokes the other's token at the same moment
    results = await asyncio.gather(
        tokens.revoke(ctx, me, him.token_id),
        tokens.revoke(ctx, him, me.token_id),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "Revoked"], results
    assert any(isinstance(r, Conflict) for r in results)
    async with ctx.units.fleet() as uow:
        live = await uow.tokens.live_admin_tokens(ctx.clock.now())
    assert len(live) == 1
