"""Managing API tokens: create (with a label and an expiry), list, revoke.

Admins manage every user's tokens; every user lists and revokes their own. A user asking about
a token that is not theirs is answered exactly as for a token that does not exist, so the
answer says nothing about other users' tokens. The last token that can act as an admin cannot
be revoked (nobody could then manage users or tokens); revoking the token of the request itself
is allowed, and the answer says so. Revocation takes effect on the next request: the API
process that revoked drops its token cache at once, the others on the TOKENS_REVOKED signal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from application.auth import add_token
from application.context import Context
from application.policy import ADMIN, require
from domain.auth import ApiToken, Principal, Role, token_expiry
from domain.coordination_ports import TOKENS_REVOKED
from domain.errors import Conflict, NotFound


@dataclass(frozen=True, slots=True)
class NewToken:
    token: ApiToken
    secret: str  # shown once; only its hash is stored


async def create(
    ctx: Context,
    principal: Principal,
    user: str,
    *,
    label: str = "",
    expires_in_seconds: int | None = None,
    expires_at: datetime | None = None,
) -> NewToken:
    """A new token for ``user``: admins for anyone, anyone else only for themselves. Without
    an expiry it never expires; otherwise 1 minute to 5 years ahead (``token_expiry``)."""
    if principal.name != user:
        require(principal, ADMIN, "create tokens for other users")
    expiry = token_expiry(ctx.clock.now(), in_seconds=expires_in_seconds, at=expires_at)
    async with ctx.units.fleet() as uow:
        token, secret = await add_token(ctx, uow, user, label=label, expires_at=expiry)
        await uow.commit()
    return NewToken(token, secret)


async def list_tokens(
    ctx: Context, principal: Principal, user: str | None = None, *, mine: bool = False
) -> list[ApiToken]:
    """Tokens, revoked and expired ones included: an admin's choice of every user's or
    ``user``'s; anyone else's (or with ``mine``) their own. A non-admin naming another user is
    Forbidden, whether that user exists or not."""
    if mine or (user is None and principal.role != Role.ADMIN):
        user = principal.name
    if user != principal.name:
        require(principal, ADMIN, "list other users' tokens")
    async with ctx.units.fleet() as uow:
        return await uow.tokens.list(user)


def _not_found(token_id: str, principal: Principal, mine: bool) -> NotFound:
    if principal.role == Role.ADMIN and not mine:
        return NotFound(
            f"no token {token_id}", fix="see `tp admin token ls` for the ids", field="id"
        )
    # the same words whether it exists (another user's) or not: no oracle
    return NotFound(
        f"you have no token {token_id}", fix="see `tp token ls` for your tokens' ids", field="id"
    )


@dataclass(frozen=True, slots=True)
class Revoked:
    token: ApiToken
    already: bool  # it was revoked before (its first revocation is kept)
    own_request: bool  # the token this request came with: the next request is refused


async def revoke(
    ctx: Context, principal: Principal, token_id: str, *, mine: bool = False
) -> Revoked:
    """Revoke a token: an admin any (unless ``mine``), anyone else only their own. Revoking
    one already revoked changes nothing. Revoking the last token that can act as an admin is
    a Conflict."""
    now = ctx.clock.now()
    async with ctx.units.fleet() as uow:
        token = await uow.tokens.get(token_id)
        theirs = token is not None and token.name == principal.name
        if token is None or not (theirs or (principal.role == Role.ADMIN and not mine)):
            raise _not_found(token_id, principal, mine)
        if token.revoked:
            return Revoked(token, True, token.id == principal.token_id)
        live_admins = await uow.tokens.live_admin_tokens(now)  # locked: one revocation at once
        if [t.id for t in live_admins] == [token.id]:
            raise Conflict(
                f"token {token.id} is the last token that can act as an admin; revoked, nobody "
                "could manage users and tokens any more",
                fix="create another admin token first (`tp admin token create admin`), log in "
                "with it, then revoke this one",
                field="id",
            )
        revoked = await uow.tokens.revoke(token.id, principal.name, now)
        await uow.commit()
    if revoked is None:  # deleted meanwhile: there is no way to delete a token
        raise _not_found(token_id, principal, mine)
    await ctx.signals.notify(TOKENS_REVOKED)
    return Revoked(revoked, False, token.id == principal.token_id)
