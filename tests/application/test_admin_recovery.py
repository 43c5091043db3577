"""`tp admin recover`'s step (``application.tokens.recover_admin``): a new token for an enabled
admin with no principal, refusals that name the admins, nothing stored when refused; over
in-memory adapters (the command against a live database: tests/e2e/test_cli_every_command.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from application import policy, tokens
from application.auth import authenticate
from application.context import Context
from domain.auth import Role
from domain.errors import InvalidInput, NotFound
from tests.support.context import ADMIN, memory_context

pytestmark = pytest.mark.unit


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path)


async def _token_count(ctx: Context) -> int:
    return len(await tokens.list_tokens(ctx, ADMIN))


async def test_recovery_makes_a_working_admin_token_and_logs_who(
    ctx: Context, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "tuneplane.auth"):
        new = await tokens.recover_admin(ctx, "admin", by="root on db1", expires_in_seconds=86400)
    principal = await authenticate(ctx, new.secret)
    assert (principal.name, principal.role) == ("admin", Role.ADMIN)
    assert new.token.label == tokens.RECOVERY_LABEL and new.token.expires_at is not None
    [line] = [r for r in caplog.records if r.name == "tuneplane.auth"]
    assert line.levelno == logging.WARNING
    assert all(s in line.getMessage() for s in (new.token.id, "user admin", "root on db1"))
    assert new.secret not in caplog.text  # the secret is printed once, never logged
    labelled = await tokens.recover_admin(ctx, "admin", by="x", label="lost laptop")
    assert labelled.token.label == "lost laptop"


@pytest.mark.parametrize(
    ("user", "error", "said", "fix"),
    [
        ("nobody", NotFound, "no user nobody", "tp admin recover --user admin"),
        ("alice", InvalidInput, "alice has role member, not admin", "--role admin"),
        ("Bad\x00Name", InvalidInput, "is not a valid name", "lower-case letters"),
    ],
)
async def test_recovery_refuses_anyone_but_an_existing_admin(
    ctx: Context, user: str, error: type[Exception], said: str, fix: str
) -> None:
    before = await _token_count(ctx)
    with pytest.raises(error) as refused:
        await tokens.recover_admin(ctx, user, by="x")
    assert said in str(refused.value) and fix in getattr(refused.value, "fix", "")
    assert await _token_count(ctx) == before


async def test_recovery_refuses_a_disabled_admin_naming_an_enabled_one(ctx: Context) -> None:
    await policy.add_user(ctx, ADMIN, "root2", Role.ADMIN, ["default"])
    await policy.update_user(ctx, ADMIN, "root2", disabled=True)
    with pytest.raises(InvalidInput) as refused:
        await tokens.recover_admin(ctx, "root2", by="x")
    assert "root2 is disabled" in refused.value.message
    assert "tp admin recover --user admin" in refused.value.fix
    assert "tp admin user set root2 --enable" in refused.value.fix
    with pytest.raises(InvalidInput) as bad_expiry:
        await tokens.recover_admin(ctx, "admin", by="x", expires_in_seconds=-5)
    assert bad_expiry.value.field == "expires_in_seconds"
