"""Contract: managing API tokens (issue 24): listing, revoking (once, by whom), the last use
written at most once a minute, and the tokens that can still act as an admin."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from domain.auth import LAST_USED_PRECISION, Role, User
from domain.unit_of_work import UnitOfWorkFactory
from tests.contract.builders import T0, a_token
from tests.contract.test_node_ports import blocked

pytestmark = pytest.mark.contract


async def _users(uow_factory: UnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.policy.put_user(User("root", Role.ADMIN))
        await uow.policy.put_user(User("boss", Role.ADMIN))
        await uow.policy.put_user(User("carol", Role.MEMBER))
        await uow.commit()


async def test_list_get_revoke_and_touch(uow_factory: UnitOfWorkFactory) -> None:
    await _users(uow_factory)
    later = a_token(id="tok-b", name="carol", created_at=T0 + timedelta(hours=1), label="ci")
    first = a_token(id="tok-a", name="carol", expires_at=T0 + timedelta(days=30))
    admin = a_token(id="tok-c", name="root")
    async with uow_factory() as uow:
        for t in (later, first, admin):
            await uow.tokens.add(t)
        await uow.commit()
    async with uow_factory() as uow:
        assert [t.id for t in await uow.tokens.list()] == ["tok-a", "tok-b", "tok-c"]
        assert await uow.tokens.list("carol") == [first, later]
        assert await uow.tokens.list("nobody") == []
        assert await uow.tokens.get("tok-b") == later
        assert await uow.tokens.get("tok-nope") is None
    now = T0 + timedelta(hours=2)
    async with uow_factory() as uow:
        revoked = await uow.tokens.revoke("tok-a", "root", now)
        assert revoked is not None and (revoked.revoked_at, revoked.revoked_by) == (now, "root")
        # a second revocation keeps the first one's time and author
        again = await uow.tokens.revoke("tok-a", "carol", now + timedelta(minutes=5))
        assert again == revoked
        assert await uow.tokens.revoke("tok-nope", "root", now) is None
        await uow.commit()
    async with uow_factory() as uow:
        stored = await uow.tokens.get("tok-a")
        assert stored is not None and stored.revoked and not stored.usable(now)
        assert stored.label == "" and stored.expires_at == T0 + timedelta(days=30)
    # a use is written when the stored one is a minute old, not at every request
    for at, expected in (
        (now, now),
        (now + LAST_USED_PRECISION - timedelta(seconds=1), now),
        (now + LAST_USED_PRECISION, now + LAST_USED_PRECISION),
        (now, now + LAST_USED_PRECISION),  # a clock behind (another process) never goes back
    ):
        async with uow_factory() as uow:
            await uow.tokens.touch("tok-b", at)
            await uow.commit()
        async with uow_factory() as uow:
            token = await uow.tokens.get("tok-b")
            assert token is not None and token.last_used_at == expected, at


async def test_live_admin_tokens(uow_factory: UnitOfWorkFactory) -> None:
    await _users(uow_factory)
    now = T0 + timedelta(days=1)
    tokens = [
        a_token(id="tok-1", name="root"),
        a_token(id="tok-2", name="boss", expires_at=now + timedelta(seconds=1)),
        a_token(id="tok-3", name="boss", expires_at=now),  # expired at ``now``
        a_token(id="tok-4", name="root", revoked_at=T0, revoked_by="root"),
        a_token(id="tok-5", name="carol"),  # not an admin
    ]
    async with uow_factory() as uow:
        for t in tokens:
            await uow.tokens.add(t)
        await uow.commit()
    async with uow_factory() as uow:
        assert {t.id for t in await uow.tokens.live_admin_tokens(now)} == {"tok-1", "tok-2"}
    async with uow_factory() as uow:
        await uow.policy.put_user(User("boss", Role.ADMIN, disabled=True))
        await uow.commit()
    async with uow_factory() as uow:
        assert [t.id for t in await uow.tokens.live_admin_tokens(now)] == ["tok-1"]


async def test_enabled_admins_are_locked_until_the_unit_ends(
    uow_factory: UnitOfWorkFactory, request: pytest.FixtureRequest
) -> None:
    """Two changes of the admins take turns: the second one's ``enabled_admins`` waits for the
    first unit, then sees the admin it demoted gone (what keeps one enabled admin left)."""
    await _users(uow_factory)

    async def second() -> list[str]:
        async with uow_factory() as uow:
            return [u.name for u in await uow.policy.enabled_admins()]

    async with uow_factory() as uow:
        assert [u.name for u in await uow.policy.enabled_admins()] == ["boss", "root"]
        await uow.policy.put_user(User("boss", Role.MEMBER))
        task = asyncio.create_task(second())
        await blocked(request, task)
        await uow.commit()
    assert await task == ["root"]
    async with uow_factory() as uow:
        await uow.policy.put_user(User("root", Role.ADMIN, disabled=True))
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.policy.enabled_admins() == []
