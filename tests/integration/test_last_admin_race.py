"""Two admins demote or disable each other at once on PostgreSQL: the changes take turns (the
enabled admins' rows are locked), so one passes and the other is refused with 409, and an
enabled admin is always left (docs/operations.md#tokens)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from application import policy
from application.auth import authenticate, bootstrap_admin, create_token
from application.context import Context
from domain.auth import Role, User
from domain.errors import Conflict
from domain.ports import PolicyRepository
from entrypoints.api.app import create_app
from tests.support.asgi import asgi_transport
from tests.support.context import memory_context

pytestmark = pytest.mark.integration

_LOCK_WAITS = text(
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
)


class _Gate:
    """Holds each change of a user just before it writes, until both racers got there (each
    has read the admins and its user: without a lock both pass) or one of them waits for a
    lock the other holds (they take turns): two truly overlapping transactions either way."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._arrived = 0

    async def reached(self) -> None:
        self._arrived += 1
        for _ in range(2000):
            if self._arrived >= 2:
                return
            async with self._engine.connect() as conn:
                if (await conn.execute(_LOCK_WAITS)).scalar():
                    return
            await asyncio.sleep(0.005)
        raise AssertionError("the other change neither came nor waited for a lock")


class _GatedPolicy:
    def __init__(self, inner: PolicyRepository, gate: _Gate) -> None:
        self._inner = inner
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put_user(self, user: User) -> None:
        await self._gate.reached()
        await self._inner.put_user(user)


class _GatedUnit(PostgresUnitOfWork):
    def __init__(self, engine: AsyncEngine, gate: _Gate) -> None:
        super().__init__(engine)
        self._gate = gate

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        self.policy = _GatedPolicy(self.policy, self._gate)
        return self


async def _two_admins(tmp_path: Path, engine: AsyncEngine) -> tuple[Context, str, str]:
    """A PostgreSQL context with exactly two enabled admins, admin and adm9; their tokens."""
    ctx = dataclasses.replace(memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(engine))
    first = await bootstrap_admin(ctx)
    assert first is not None
    await policy.add_user(ctx, await authenticate(ctx, first), "adm9", Role.ADMIN)
    second = await create_token(ctx, "adm9")
    gate = _Gate(engine)
    return dataclasses.replace(ctx, uow=lambda: _GatedUnit(engine, gate)), first, second


async def _enabled_admins(ctx: Context) -> list[str]:
    async with ctx.units.fleet() as uow:
        return [u.name for u in await uow.policy.users() if u.role is Role.ADMIN and not u.disabled]


Change = Callable[[Context, Any, str], Awaitable[User]]


async def _demote(ctx: Context, who: Any, name: str) -> User:
    return await policy.update_user(ctx, who, name, role=Role.MEMBER)


async def _disable(ctx: Context, who: Any, name: str) -> User:
    return await policy.update_user(ctx, who, name, disabled=True)


@pytest.mark.parametrize(("one", "other"), [(_demote, _demote), (_disable, _demote)])
async def test_admins_changing_each_other_at_once_leave_an_enabled_admin(
    tmp_path: Path, pg_engine: AsyncEngine, one: Change, other: Change
) -> None:
    ctx, first, second = await _two_admins(tmp_path, pg_engine)
    admin, adm9 = await authenticate(ctx, first), await authenticate(ctx, second)
    results = await asyncio.gather(
        one(ctx, admin, "adm9"), other(ctx, adm9, "admin"), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "User"], results
    refused = next(r for r in results if isinstance(r, Conflict))
    assert "is the last enabled admin" in str(refused)
    assert "--role admin" in refused.fix
    assert len(await _enabled_admins(ctx)) == 1


async def test_the_last_admin_cannot_be_demoted_over_http_by_a_racing_admin(
    tmp_path: Path, pg_engine: AsyncEngine
) -> None:
    """The reproduction: PATCH /v1/users/adm9 as admin and PATCH /v1/users/admin as adm9 at
    once; one is 200, the other 409 naming the problem and the fix."""
    ctx, first, second = await _two_admins(tmp_path, pg_engine)
    # httpx's ASGI transport runs the app on this test's loop (the pool is bound to it)
    transport = asgi_transport(create_app(ctx, supervise=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        answers = await asyncio.gather(
            client.patch(
                "/v1/users/adm9",
                json={"role": "member"},
                headers={"Authorization": f"Bearer {first}"},
            ),
            client.patch(
                "/v1/users/admin",
                json={"role": "member"},
                headers={"Authorization": f"Bearer {second}"},
            ),
        )
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    problem = next(a for a in answers if a.status_code == 409).json()
    assert "last enabled admin" in problem["detail"]
    assert "tp admin user set" in problem["fix"]
    assert len(await _enabled_admins(ctx)) == 1
