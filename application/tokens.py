"""Managing API tokens: create (with a label and an expiry), list, revoke.

Admins manage every user's tokens; every user lists and revokes their own. A user asking about
a token that is not theirs is answered exactly as for a token that does not exist, so the
answer says nothing about other users' tokens. The last token that can act as an admin cannot
be revoked (nobody could then manage users or tokens); revoking the token of the request itself
is allowed, and the answer says so. Revocation takes effect on the next request: the API
process that revoked drops its token cache at once, the others on the TOKENS_REVOKED signal.

``recover_admin`` is the way back in when every admin token is lost: an operator with the
database's credentials (`tp admin recover`, no HTTP route) makes a new token for an enabled
admin; possession of the database is the proof, and a WARNING line records it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from application.auth import add_token
from application.context import Context
from application.policy import ADMIN, require
from domain.auth import ApiToken, Principal, Role, User, token_expiry
from domain.catalog import check_name
from domain.coordination_ports import TOKENS_REVOKED
from domain.errors import Conflict, InvalidInput, NotFound

log = logging.getLogger("tuneplane.auth")
RECOVERY_LABEL = "admin access recovered"  # `tp admin recover`'s token label unless given one


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


async def recover_admin(
    ctx: Context,
    user: str,
    *,
    by: str,
    label: str = "",
    expires_in_seconds: int | None = None,
    expires_at: datetime | None = None,
) -> NewToken:
    """A new token for the enabled admin ``user``, for an operator who holds the database's
    credentials but no admin token (``by``: who and where, for the log). No principal: whoever
    can write the database can make one anyway. A user that does not exist, is not an admin or
    is disabled is refused, the fix naming the enabled admins. The label says it was a
    recovery unless one is given; a WARNING line records it."""
    check_name(user, "user name", "user")
    expiry = token_expiry(ctx.clock.now(), in_seconds=expires_in_seconds, at=expires_at)
    async with ctx.units.fleet() as uow:
        found = await uow.policy.user(user)
        admins = sorted(
            u.name for u in await uow.policy.users() if u.role == Role.ADMIN and not u.disabled
        )
        if found is None or found.role != Role.ADMIN or found.disabled:
            raise _not_recoverable(user, found, admins)
        token, secret = await add_token(
            ctx, uow, user, label=label or RECOVERY_LABEL, expires_at=expiry
        )
        await uow.commit()
    log.warning(
        "admin access recovered: token %s for user %s made on the database directly "
        "(`tp admin recover`) by %s",
        token.id,
        user,
        by,
    )
    return NewToken(token, secret)


def _not_recoverable(user: str, found: User | None, admins: list[str]) -> Exception:
    if admins:
        fix = f"recover an enabled admin: `tp admin recover --user {admins[0]}` (admins: "
        fix += ", ".join(admins) + ")"
    else:  # the API never leaves none (update_user refuses to demote or disable the last)
        fix = "no user is an enabled admin: `tp admin bootstrap` on a new database, or ask "
        fix += "whoever changed the users table by hand"
    if found is None:
        return NotFound(f"no user {user}", fix=fix, field="user")
    then = f", then log in with it and {{}} `tp admin user set {user} {{}}`" if admins else ""
    if found.disabled:
        return InvalidInput(
            f"user {user} is disabled",
            fix=fix + then.format("enable it:", "--enable"),
            field="user",
        )
    return InvalidInput(
        f"user {user} has role {found.role}, not admin: its token would not recover admin access",
        fix=fix + then.format("make it an admin:", "--role admin"),
        field="user",
    )
