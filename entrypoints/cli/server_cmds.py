"""Server-side commands: `tp up` (embedded defaults) and `tp serve` (one API process)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

from cyclopts import Parameter

log = logging.getLogger("tuneplane")


def _settings(
    state_dir: Path | None, port: int | None, host: str | None, **more: int | None
) -> Any:
    """The settings (environment, settings file, defaults), with the flags given on top."""
    from entrypoints.settings import Settings

    settings = Settings.from_env()
    changes: dict[str, Any] = {k: v for k, v in more.items() if v is not None}
    if "pg_port" in changes:
        pg = dataclasses.replace(settings.postgres, port=changes.pop("pg_port"))
        changes["postgres"] = pg
    if state_dir is not None:
        changes["state_dir"] = state_dir
    if port is not None:
        changes["port"] = port
    if host is not None:
        changes["host"] = host
    return dataclasses.replace(settings, **changes)


def up(
    *,
    state_dir: Annotated[
        Path | None, Parameter(help="state directory (default ~/.local/state/tuneplane)")
    ] = None,
    port: Annotated[
        int | None, Parameter(help="HTTP port of the API (default 8470; TUNEPLANE_HTTP_PORT)")
    ] = None,
    host: Annotated[
        str | None,
        Parameter(help="HTTP address of the API (default 127.0.0.1; TUNEPLANE_HTTP_HOST)"),
    ] = None,
    node_gateway_port: Annotated[
        int | None,
        Parameter(
            help="port of the node control gateway (default 8471; TUNEPLANE_NODE_GATEWAY_PORT)"
        ),
    ] = None,
    telemetry_gateway_port: Annotated[
        int | None,
        Parameter(
            help="port of the telemetry gateway (default 8472; TUNEPLANE_TELEMETRY_GATEWAY_PORT)"
        ),
    ] = None,
    pg_port: Annotated[
        int | None,
        Parameter(
            help="port of the private PostgreSQL on 127.0.0.1 (default: a free one, kept across "
            "restarts; TUNEPLANE_PG_PORT)"
        ),
    ] = None,
) -> None:
    """Start the control plane on embedded defaults: a private PostgreSQL (unless
    TUNEPLANE_DATABASE_URL is set), migrations, the local container backend and the HTTP API,
    the gateways and this machine's node daemon (each started again if it exits; restart one with
    `kill $(cat STATE/NAME.pid)`). Prints the URL and, on first start, an admin token. Ctrl-C
    stops everything it started.

    Every listener's port is settable, by a flag or by its variable (the flag wins): the API
    --port / TUNEPLANE_HTTP_PORT (8470), the node control gateway --node-gateway-port /
    TUNEPLANE_NODE_GATEWAY_PORT (8471), the telemetry gateway --telemetry-gateway-port /
    TUNEPLANE_TELEMETRY_GATEWAY_PORT (8472), the private PostgreSQL --pg-port /
    TUNEPLANE_PG_PORT (a free port). The addresses: TUNEPLANE_HTTP_HOST,
    TUNEPLANE_NODE_GATEWAY_HOST, TUNEPLANE_TELEMETRY_GATEWAY_HOST. `tp config show` prints
    every setting and where it came from."""
    from entrypoints import logs
    from entrypoints.up_check import refusal

    logs.setup("up")
    settings = _settings(
        state_dir,
        port,
        host,
        node_gateway_port=node_gateway_port,
        telemetry_gateway_port=telemetry_gateway_port,
        pg_port=pg_port,
    )
    if (refused := refusal(settings)) is not None:  # before the server's modules load
        sys.exit(refused)
    from entrypoints.up import run_up

    sys.exit(run_up(settings))


def serve(
    *,
    port: Annotated[int | None, Parameter(help="HTTP port (default 8470)")] = None,
    host: Annotated[str | None, Parameter(help="HTTP address (default 127.0.0.1)")] = None,
    no_supervisor: Annotated[bool, Parameter(help="serve HTTP only; launch nothing")] = False,
) -> None:
    """Serve one API process against TUNEPLANE_DATABASE_URL (already migrated). Run several
    behind a load balancer for more throughput; each also supervises jobs unless told not to.
    On an empty database the first one creates user admin and writes its token to
    STATE/admin-token (0600), printing the path (and the token, on a terminal); `tp admin
    bootstrap` does that step alone."""
    from entrypoints import logs
    from entrypoints.process import check_listen, require_database, run_server

    logs.setup("api")
    settings = _settings(None, port, host)
    # a bad address is refused before the server's modules load (a second and a half of CPU)
    check_listen(settings.host, settings.port, "--host/--port or TUNEPLANE_HTTP_HOST/_PORT")
    require_database(settings.database_url)  # and a missing database (`tp up` sets its own)
    from entrypoints.server import serve as serve_async

    with contextlib.suppress(KeyboardInterrupt):
        run_server(serve_async(settings, supervise=not no_supervisor))


def runtime_build(
    name: Annotated[
        str,
        Parameter(help="busybox, python, python-numpy, python-torch or pytorch-trl"),
    ],
    /,
    *,
    force: Annotated[bool, Parameter(help="rebuild even if the image exists")] = False,
) -> int:
    """Build a runtime image in the local container engine (DOCKER_HOST) from a root file
    system made on this machine: no registry is needed. `python` runs debootstrap (about a
    minute the first time; the root file system is cached); `pytorch-trl` adds the wheels of
    its lock file (docs/runtimes.md). The same inputs give the same image id."""
    from entrypoints.runtime_build import build

    return build(name, force=force)
