"""`tp login`, `tp logout`, `tp whoami`."""

from __future__ import annotations

from typing import Annotated

from cyclopts import Parameter

from entrypoints.cli import output
from entrypoints.cli.client import Api, connect
from entrypoints.cli.config import (
    check_token,
    credentials_path,
    load_credentials,
    normalize_server,
    remove_credentials,
    save_credentials,
)


def login(
    *,
    server: Annotated[str, Parameter(name="--server")],
    token: Annotated[str, Parameter(name="--token")],
) -> int:
    """Check a token against a server and store both for later commands.

    Parameters
    ----------
    server
        The control plane's URL, e.g. http://127.0.0.1:8080 (`tp up` prints it).
    token
        Your API token (`tp up` prints one).
    """
    check_token(token, "--token")
    url = normalize_server(server)
    with Api(url, token) as api:
        me = api.get("/v1/whoami")
    path = save_credentials(url, token)
    output.out.print(f"logged in to {url} as {me.get('name')} ({me.get('role')})", markup=False)
    output.info(f"credentials stored in {path} (mode 0600)")
    return 0


def logout() -> int:
    """Forget the stored login."""
    if remove_credentials():
        output.out.print(f"removed {credentials_path()}", markup=False)
    else:
        output.out.print("not logged in", markup=False)
    return 0


def whoami() -> int:
    """Show who the stored (or environment) token belongs to."""
    creds = load_credentials()
    with connect(creds) as api:
        me = api.get("/v1/whoami")
    output.out.print(
        f"{me.get('name')} ({me.get('role')}) on {creds.server} [from {creds.source}]",
        markup=False,
    )
    return 0
