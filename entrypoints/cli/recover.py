"""`tp admin recover`: a new admin token made on the database directly, for an operator who
lost every admin token (docs/operations.md#tokens). No HTTP route: holding the database's
credentials (TUNEPLANE_DATABASE_URL) is the proof."""

from __future__ import annotations

import asyncio
import getpass
import socket
from datetime import datetime
from typing import Annotated, Any

from cyclopts import Parameter

from entrypoints.cli import output
from entrypoints.cli.tokens import parse_expires


def _who() -> str:
    """Who recovers, for the log line: the OS account and the host."""
    try:
        account = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        account = "an unnamed account"
    return f"{account} on {socket.gethostname()}"


def recover(
    *,
    user: Annotated[str, Parameter(name="--user", help="the admin to recover")] = "admin",
    label: Annotated[
        str, Parameter(name="--label", help="what it is for (default: admin access recovered)")
    ] = "",
    expires: Annotated[
        str | None,
        Parameter(name="--expires", help="30d, 12h, 2w, 1y (1m to 5y) or a date; default never"),
    ] = None,
) -> int:
    """Make a new token for an existing, enabled admin on the database (TUNEPLANE_DATABASE_URL)
    when every admin token is lost, and print it once. Refused for a user that is not an admin
    or is disabled. Logs a WARNING line (who, on which host, which token); the token's label
    says it was a recovery unless --label is given."""
    from application.tokens import recover_admin
    from entrypoints.containers.database import reach_database
    from entrypoints.containers.lifecycle import resolve, started
    from entrypoints.containers.setup import SetupContainer
    from entrypoints.settings import Settings

    when: dict[str, Any] = parse_expires(expires) if expires is not None else {}
    if "expires_at" in when:
        when["expires_at"] = datetime.fromisoformat(when["expires_at"])
    settings = Settings.from_env()

    async def made() -> Any:
        await reach_database(settings)  # a clear error for a database that is not there
        async with started(SetupContainer(settings=settings)) as container:
            ctx = await resolve(container.context)
            return await recover_admin(ctx, user, by=_who(), label=label, **when)

    new = asyncio.run(made())
    output.out.print(new.secret, markup=False)
    until = new.token.expires_at.isoformat() if new.token.expires_at else "never"
    output.info(
        f"token {new.token.id} for {user} (expires: {until}): shown once, only its hash is "
        "stored; log in with `tp login --server URL --token <token>`, then revoke the lost "
        "ones (`tp admin token ls`, `tp admin token revoke ID`)"
    )
    return 0
