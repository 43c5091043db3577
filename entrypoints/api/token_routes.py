"""HTTP routes of API tokens: create (label, expiry), list, revoke.

Admins manage every user's tokens; every user creates, lists and revokes their own
(``application/tokens.py`` checks). No answer ever holds a token's hash; a new token's secret is
in its creation's answer only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, Parameter
from msgspec import Meta, Struct

from application import tokens
from application.context import Context
from domain.auth import MAX_LABEL_CHARS, MAX_TOKEN_LIFETIME, ApiToken
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller, TokenCache
from entrypoints.wire import Name

JSON_LIMIT = 16 * 1024
MAX_SECONDS = int(MAX_TOKEN_LIFETIME.total_seconds())
Label = Annotated[str, Meta(max_length=MAX_LABEL_CHARS, description="what the token is for")]
ExpiresIn = Annotated[
    int,
    Meta(
        ge=1,
        le=2**53,
        description=f"seconds from now, by the server's clock (60 to {MAX_SECONDS})",
    ),
]


class TokenIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """Every field optional; without an expiry the token never expires."""

    label: Label = ""
    expires_in_seconds: ExpiresIn | None = None
    expires_at: datetime | None = None


class TokenInfo(Struct):
    id: str
    user: str
    label: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None  # to the minute
    revoked_at: datetime | None
    revoked_by: str | None
    state: str  # active, expired or revoked


class TokenOut(Struct):
    user: str
    token: str  # shown once; only its hash is stored
    id: str
    label: str
    created_at: datetime
    expires_at: datetime | None


class RevokedOut(Struct):
    token: TokenInfo
    already_revoked: bool  # nothing changed: it was revoked before
    own_request: bool  # the token this request came with: the next request is refused


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def token_info(t: ApiToken, now: datetime) -> TokenInfo:
    state = "revoked" if t.revoked else "expired" if t.expired(now) else "active"
    return TokenInfo(
        t.id,
        t.name,
        t.label,
        t.created_at,
        t.expires_at,
        t.last_used_at,
        t.revoked_at,
        t.revoked_by,
        state,
    )


@post(
    "/v1/users/{name:str}/tokens",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 422),
    summary="Create an API token for a user (admin; or a user for themselves), with a label "
    "and an expiry. Shown once.",
)
async def create_token(
    name: FromPath[str], state: State, principal: Caller, data: JSONBody[TokenIn | None] = None
) -> TokenOut:
    body = data or TokenIn()
    new = await tokens.create(
        _ctx(state),
        principal,
        name,
        label=body.label,
        expires_in_seconds=body.expires_in_seconds,
        expires_at=body.expires_at,
    )
    t = new.token
    return TokenOut(t.name, new.secret, t.id, t.label, t.created_at, t.expires_at)


@get(
    "/v1/tokens",
    responses=responses(400, 401, 403),
    summary="API tokens, never their secrets: an admin's choice of everyone's or a user's; "
    "anyone else's own",
)
async def list_tokens(
    state: State,
    principal: Caller,
    user: Annotated[Name | None, Parameter(description="only this user's (admins)")] = None,
    mine: Annotated[bool, Parameter(description="only the caller's own")] = False,
) -> list[TokenInfo]:
    ctx = _ctx(state)
    found = await tokens.list_tokens(ctx, principal, user, mine=mine)
    now = ctx.clock.now()
    return [token_info(t, now) for t in found]


@post(
    "/v1/tokens/{token_id:str}/revoke",
    status_code=200,
    responses=responses(400, 401, 404, 409),
    summary="Revoke an API token (admin: anyone's; anyone: their own); the next request with "
    "it is refused",
)
async def revoke_token(
    token_id: Annotated[str, Parameter(min_length=1, max_length=80)],
    state: State,
    principal: Caller,
    mine: Annotated[bool, Parameter(description="only if it is the caller's own")] = False,
) -> RevokedOut:
    ctx = _ctx(state)
    done = await tokens.revoke(ctx, principal, token_id, mine=mine)
    if not done.already:
        cache: TokenCache = state.token_cache
        cache.clear()  # this process refuses it on the very next request
    return RevokedOut(token_info(done.token, ctx.clock.now()), done.already, done.own_request)


TOKEN_ROUTES = [create_token, list_tokens, revoke_token]
