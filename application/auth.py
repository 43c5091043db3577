"""API tokens: minting, the first admin token, and authentication."""

from __future__ import annotations

import hashlib

from application.context import Context
from domain.auth import ApiToken, Principal, Role
from domain.errors import Unauthenticated

TOKEN_PREFIX = "tp_"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


async def create_token(ctx: Context, name: str, role: Role) -> str:
    """Store a new token for user ``name``; return the secret (shown once, never stored)."""
    secret = TOKEN_PREFIX + ctx.new_secret()
    token = ApiToken(ctx.ids.new("tok"), name, role, hash_token(secret), ctx.clock.now())
    async with ctx.uow() as uow:
        await uow.tokens.add(token)
        await uow.commit()
    return secret


async def bootstrap_admin(ctx: Context) -> str | None:
    """On a fresh database, create the first admin token and return it; otherwise None."""
    async with ctx.uow() as uow:
        if await uow.tokens.count() > 0:
            return None
    return await create_token(ctx, "admin", Role.ADMIN)


async def authenticate(ctx: Context, secret: str | None) -> Principal:
    if not secret:
        raise Unauthenticated(
            "no API token given",
            fix="send `Authorization: Bearer <token>`; `tp login --server URL --token T` "
            "stores one for the CLI",
        )
    async with ctx.uow() as uow:
        token = await uow.tokens.by_hash(hash_token(secret))
    if token is None or token.revoked:
        raise Unauthenticated(
            "the API token is unknown or revoked",
            fix="log in again with a valid token (`tp login --server URL --token T`)",
        )
    return Principal(token.name, token.role)
