"""API tokens: minting, the first admin, and authentication.

A token names its user; the role and teams are the user's (``domain.auth.User``), read on every
authentication, so changing a user's role or disabling the user takes effect on all its tokens.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from application.context import Context
from domain.auth import ApiToken, Principal, Role, User, check_label
from domain.errors import Conflict, InvalidInput, NotFound, Unauthenticated
from domain.fleet import Queue, Team
from domain.unit_of_work import FleetUnit

TOKEN_PREFIX = "tp_"
DEFAULT_TEAM = "default"
DEFAULT_QUEUE = "default"
ADMIN_USER = "admin"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


FIRST_ADMIN_TOKEN_ID = "tok-first-admin"  # one id: of two processes bootstrapping, one wins


async def add_token(
    ctx: Context,
    uow: FleetUnit,
    user_name: str,
    token_id: str | None = None,
    *,
    label: str = "",
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Store a new token of an existing, enabled user in ``uow``: the token and its secret."""
    user = await uow.policy.user(user_name)
    if user is None:
        raise NotFound(
            f"no user {user_name}",
            fix=f"create the user first: `tp admin user add {user_name} --role member --team T`",
            field="user",
        )
    if user.disabled:
        raise InvalidInput(
            f"user {user_name} is disabled; a token for it would not work",
            fix=f"enable the user first: `tp admin user set {user_name} --enable`",
            field="user",
        )
    secret = TOKEN_PREFIX + ctx.new_secret()
    token = ApiToken(
        token_id or ctx.ids.new("tok"),
        user_name,
        hash_token(secret),
        ctx.clock.now(),
        label=check_label(label),
        expires_at=expires_at,
    )
    await uow.tokens.add(token)
    return token, secret


async def create_token(ctx: Context, user_name: str) -> str:
    """Store a new token for an existing user; return the secret (shown once, never stored)."""
    async with ctx.units.fleet() as uow:
        _, secret = await add_token(ctx, uow, user_name)
        await uow.commit()
    return secret


async def bootstrap_admin(ctx: Context) -> str | None:
    """On a database without tokens, make sure team and queue ``default`` and user ``admin``
    (role admin, team default) exist, and create that user's first token; return it.
    Otherwise return None. Objects that already exist are left as they are.

    Several processes may start at once on an empty database: the first token has a fixed id,
    so exactly one of them stores it (the others' insert conflicts and they return None)."""
    try:
        return await _bootstrap_admin(ctx)
    except Conflict:
        async with ctx.units.fleet() as uow:
            if await uow.tokens.count() > 0:
                return None  # another process bootstrapped meanwhile
        raise


async def _bootstrap_admin(ctx: Context) -> str | None:
    async with ctx.units.fleet() as uow:
        if await uow.tokens.count() > 0:
            return None
        if DEFAULT_TEAM not in {t.name for t in await uow.policy.teams()}:
            await uow.policy.put_team(Team(DEFAULT_TEAM))
        if await uow.policy.queue(DEFAULT_QUEUE) is None:
            await uow.policy.put_queue(Queue(DEFAULT_QUEUE, DEFAULT_TEAM))
        if await uow.policy.user(ADMIN_USER) is None:
            await uow.policy.put_user(
                User(ADMIN_USER, Role.ADMIN, (DEFAULT_TEAM,), created_at=ctx.clock.now())
            )
        _, secret = await add_token(
            ctx, uow, ADMIN_USER, FIRST_ADMIN_TOKEN_ID, label="first admin token"
        )
        await uow.commit()
    return secret


async def authenticate(ctx: Context, secret: str | None) -> Principal:
    return (await authenticate_token(ctx, secret))[0]


async def authenticate_token(ctx: Context, secret: str | None) -> tuple[Principal, ApiToken]:
    """The caller the secret authenticates, and its token (its expiry bounds a cache); records
    the use (``ApiToken.last_used_at``, at most one write a minute a token)."""
    if not secret:
        raise Unauthenticated(
            "no API token given",
            fix="send `Authorization: Bearer <token>`; `tp login --server URL --token T` "
            "stores one for the CLI",
        )
    now = ctx.clock.now()
    async with ctx.units.fleet() as uow:
        token = await uow.tokens.by_hash(hash_token(secret))
        user = await uow.policy.user(token.name) if token is not None else None
        works = token is not None and user is not None and not user.disabled
        if works and token is not None and token.usable(now) and token.needs_touch(now):
            await uow.tokens.touch(token.id, now)  # at most once a minute a token
            await uow.commit()
    if token is None or not token.usable(now):
        # one answer for unknown, expired and revoked: it tells a guesser nothing
        raise Unauthenticated(
            "the API token is unknown, expired or revoked",
            fix="log in again with a valid token (`tp login --server URL --token T`); "
            "an admin makes new ones (`tp admin token create USER`)",
        )
    if user is None:
        raise Unauthenticated(
            f"the API token belongs to user {token.name}, which does not exist",
            fix="ask an admin to create the user and a token for it "
            f"(`tp admin user add {token.name}`, `tp admin token create {token.name}`)",
        )
    if user.disabled:
        raise Unauthenticated(
            f"user {user.name} is disabled",
            fix=f"ask an admin to enable it (`tp admin user set {user.name} --enable`)",
        )
    return Principal(user.name, user.role, user.teams, token_id=token.id), token
