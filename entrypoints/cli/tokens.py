"""API tokens: `tp admin token create|ls|revoke` (admins: anyone's), `tp token ls|revoke` (your
own), and `tp admin bootstrap` (the first admin, on the database directly)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from domain.auth import MAX_TOKEN_LIFETIME
from domain.errors import Conflict, InvalidInput
from entrypoints.cli import output
from entrypoints.cli.client import Api, connect, seg

JsonFlag = Annotated[bool, Parameter(name="--json", help="Print JSON for scripts.")]
token_app = App(name="token", help="API tokens: create, list and revoke (admins: anyone's).")
own_app = App(name="token", help="Your own API tokens: list and revoke them.")

# units of --expires; m is minutes (as `tp node token create --ttl`), a month is 30d
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"([0-9]{1,12})([mhdwy])")
_MAX_SECONDS = int(MAX_TOKEN_LIFETIME.total_seconds())
EXPIRES_FIX = (
    "give a duration from 1m to 5y (units m, h, d, w, y: e.g. 30d, 12h, 2w) or a date "
    "(2027-01-31, or 2027-01-31T12:00:00Z; UTC unless it names a zone)"
)


def parse_expires(text: str) -> dict[str, Any]:
    """`--expires`: a duration ("30d") → ``expires_in_seconds`` (counted by the server's
    clock), or a date or time → ``expires_at``. The server checks the range again (1 minute to
    5 years); this refuses what cannot be one, naming the flag."""
    value = text.strip()
    if m := _DURATION.fullmatch(value):
        seconds = int(m.group(1)) * _UNITS[m.group(2)]
        if seconds == 0:
            raise InvalidInput(
                f"--expires {value} would expire at once", fix=EXPIRES_FIX, field="--expires"
            )
        if seconds > _MAX_SECONDS:
            raise InvalidInput(
                f"--expires {value} is past the limit of 5 years",
                fix=EXPIRES_FIX + "; a token without --expires never expires",
                field="--expires",
            )
        return {"expires_in_seconds": seconds}
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except ValueError:
        when = None
    if when is None or "\x00" in value:
        raise InvalidInput(
            f"--expires {text!r} is neither a duration nor a date",
            fix=EXPIRES_FIX,
            field="--expires",
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return {"expires_at": when.isoformat()}


def _state(t: dict[str, Any]) -> str:
    if t.get("state") == "revoked":
        return f"revoked {output.short_time(t.get('revoked_at'))} by {t.get('revoked_by')}"
    return str(t.get("state", ""))


def _print_tokens(tokens: list[dict[str, Any]], json: bool) -> None:
    if json:
        output.print_json(tokens)
        return
    if not tokens:
        output.info("no tokens")
        return
    output.table(
        ["ID", "USER", "LABEL", "CREATED", "EXPIRES", "LAST USED", "STATE"],
        [
            (t.get("id"), t.get("user"), t.get("label"), output.short_time(t.get("created_at")),
             output.short_time(t.get("expires_at")) or "never",
             output.short_time(t.get("last_used_at")) or "never", _state(t))
            for t in tokens
        ],
    )  # fmt: skip


def _revoke(api: Api, token_id: str, mine: bool) -> None:
    query = "?mine=true" if mine else ""
    _, answer = api.post(f"/v1/tokens/{seg(token_id)}/revoke{query}")
    token = answer["token"]
    if answer.get("already_revoked"):
        output.out.print(
            f"token {token['id']} of {token['user']} was already revoked "
            f"({output.short_time(token.get('revoked_at'))} by {token.get('revoked_by')})",
            markup=False,
        )
    else:
        output.out.print(f"revoked token {token['id']} of {token['user']}", markup=False)
    if answer.get("own_request"):
        output.warn(
            "that is the token this command used: it no longer works here; "
            "log in with another (`tp login --server URL --token T`)"
        )


@token_app.command(name="create")
def token_create(
    user: str,
    /,
    *,
    label: Annotated[str, Parameter(name="--label", help="what it is for (shown by ls)")] = "",
    expires: Annotated[
        str | None,
        Parameter(name="--expires", help="30d, 12h, 2w, 1y (1m to 5y) or a date; default never"),
    ] = None,
    json: JsonFlag = False,
) -> int:
    """Create an API token for a user and print it once (admins; anyone for themselves).

    Parameters
    ----------
    user
        The user the token authenticates as; it must exist (`tp admin user add`).
    """
    body: dict[str, Any] = {"label": label}
    if expires is not None:
        body.update(parse_expires(expires))
    with connect() as api:
        _, answer = api.post(f"/v1/users/{seg(user)}/tokens", body)
    if json:
        output.print_json(answer)
        return 0
    output.out.print(answer["token"], markup=False)
    until = output.short_time(answer.get("expires_at")) or "never"
    output.info(
        f"token {answer['id']} for {user} (expires: {until}): shown once, only its hash is "
        f"stored; log in with `tp login --server {api.server} --token <token>`"
    )
    return 0


@token_app.command(name="ls")
def token_ls(
    user: Annotated[str | None, Parameter(help="only this user's tokens")] = None,
    /,
    *,
    json: JsonFlag = False,
) -> int:
    """List API tokens, revoked and expired ones too (admins: every user's, or USER's): id,
    user, label, created, expires, last used (to the minute), state. Never their secrets."""
    with connect() as api:
        tokens = api.get("/v1/tokens", {"user": user} if user is not None else None)
    _print_tokens(tokens, json)
    return 0


@token_app.command(name="revoke")
def token_revoke(token_id: str, /) -> int:
    """Revoke an API token (admins: anyone's); the next request with it is refused. The last
    token that can act as an admin cannot be revoked.

    Parameters
    ----------
    token_id
        The token's id (`tp admin token ls`), not its secret.
    """
    with connect() as api:
        _revoke(api, token_id, mine=False)
    return 0


@own_app.command(name="ls")
def own_ls(*, json: JsonFlag = False) -> int:
    """List your API tokens: id, label, created, expires, last used (to the minute), state."""
    with connect() as api:
        tokens = api.get("/v1/tokens", {"mine": "true"})
    _print_tokens(tokens, json)
    return 0


@own_app.command(name="revoke")
def own_revoke(token_id: str, /) -> int:
    """Revoke one of your API tokens; the next request with it is refused (revoking the one
    you are logged in with is allowed: the command says so).

    Parameters
    ----------
    token_id
        The token's id (`tp token ls`), not its secret.
    """
    with connect() as api:
        _revoke(api, token_id, mine=True)
    return 0


def bootstrap(
    *,
    state_dir: Annotated[
        Path | None,
        Parameter(help="where the token's 0600 copy goes (default TUNEPLANE_STATE_DIR)"),
    ] = None,
) -> int:
    """Create the first admin on an empty database (TUNEPLANE_DATABASE_URL, migrated), as
    `tp serve` and `tp up` do at their first start: team and queue `default`, user `admin`
    and its token, printed once and written to STATE/admin-token (0600). Refused once the
    database has any token (an admin exists: log in with its token and use `tp admin token
    create`)."""
    import asyncio
    import dataclasses

    from entrypoints.containers.database import reach_database
    from entrypoints.server import ADMIN_TOKEN_FILE, first_admin_token
    from entrypoints.settings import Settings

    settings = Settings.from_env()
    if state_dir is not None:
        settings = dataclasses.replace(settings, state_dir=state_dir)

    async def made() -> str | None:
        await reach_database(settings)  # a clear error for a database that is not there
        return await first_admin_token(settings)

    token = asyncio.run(made())
    if token is None:
        raise Conflict(
            "the database has an admin already (it has API tokens): nothing to bootstrap",
            fix="log in with an admin's token and create more with `tp admin token create "
            "USER`; the first one is in STATE/admin-token where it was bootstrapped",
        )
    output.out.print(token, markup=False)
    output.info(
        f"created user admin and its token (shown once; a 0600 copy is in "
        f"{settings.state_dir / ADMIN_TOKEN_FILE}); log in with "
        f"`tp login --server URL --token <token>`"
    )
    return 0
