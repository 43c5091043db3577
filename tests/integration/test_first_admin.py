"""The first admin on an empty PostgreSQL database, bootstrapped by many processes at once
(issue 18, defect 13: `tp serve` API processes starting together): exactly one admin and one
token, returned to exactly one caller."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from application.auth import authenticate, bootstrap_admin
from domain.auth import Role
from tests.support.context import memory_context

pytestmark = pytest.mark.integration


async def test_many_bootstraps_at_once_make_one_admin_and_one_token(
    tmp_path: Path, pg_engine: AsyncEngine
) -> None:
    ctx = dataclasses.replace(memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine))
    tokens = await asyncio.gather(*(bootstrap_admin(ctx) for _ in range(8)))
    [token] = [t for t in tokens if t is not None]
    async with pg_engine.connect() as conn:
        rows = (await conn.execute(text("SELECT name FROM api_tokens"))).scalars().all()
        admins = (await conn.execute(text("SELECT name FROM users WHERE role = 'admin'"))).all()
    assert rows == ["admin"] and len(admins) == 1
    principal = await authenticate(ctx, token)
    assert (principal.name, principal.role) == ("admin", Role.ADMIN)
    assert await bootstrap_admin(ctx) is None  # a later start
