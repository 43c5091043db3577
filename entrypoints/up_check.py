"""What `tp up` refuses before anything starts (its state directory, its listen addresses), in
a module light enough to run before `entrypoints.up` and the server's modules load: a bad flag is
refused in a fraction of the second and a half those take to import."""

from __future__ import annotations

import sys

from domain.errors import InvalidInput, TunePlaneError
from entrypoints import logs
from entrypoints.process import check_listen
from entrypoints.settings import Settings


def check(settings: Settings) -> None:
    """What can be refused before anything starts: the state directory, the listen addresses."""
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(
            f"cannot use the state directory {settings.state_dir}: {exc.strerror or exc}",
            fix="pass --state-dir (or set TUNEPLANE_STATE_DIR to) a directory you can write",
        ) from None
    check_listen(settings.host, settings.port, "--host/--port or TUNEPLANE_HTTP_HOST/_PORT")
    for which in ("node", "telemetry"):
        host = getattr(settings, f"{which}_gateway_host")
        port = getattr(settings, f"{which}_gateway_port")
        check_listen(
            host,
            port,
            f"--{which}-gateway-port or TUNEPLANE_{which.upper()}_GATEWAY_HOST/_PORT",
        )
    if settings.postgres.port is not None:  # checked even when TUNEPLANE_DATABASE_URL is set
        check_listen("127.0.0.1", settings.postgres.port, "--pg-port or TUNEPLANE_PG_PORT")


def refusal(settings: Settings) -> int | None:
    """`tp up`'s exit code when ``check`` refuses the settings (the error reported), else None."""
    try:
        check(settings)
    except TunePlaneError as exc:
        logs.report(exc, stream=sys.stderr)
        return 2
    return None
