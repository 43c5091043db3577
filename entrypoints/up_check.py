"""What `tp up` refuses before anything starts (its state directory, its listen addresses), in
a module light enough to run before `entrypoints.up` and the server's modules load: a bad flag is
refused in a fraction of the second and a half those take to import."""

from __future__ import annotations

import fcntl
import os
import sys
from typing import IO

from domain.errors import Conflict, InvalidInput, TunePlaneError
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
    hold_state_dir(settings)
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


_held: IO[str] | None = None  # the state directory's lock, held until this process ends


def hold_state_dir(settings: Settings) -> None:
    """Take the state directory for this `tp up` until it ends (an advisory lock on
    ``STATE/up.lock``, released by the kernel however the process ends, kill -9 included);
    Conflict, naming the other's pid, while another `tp up` holds it. Two on one directory
    would share its PostgreSQL, node daemon and credentials, and the first to stop would stop
    the database under the other."""
    global _held
    path = settings.state_dir / "up.lock"
    if _held is not None and _held.name == str(path):
        return  # checked again by the same process (the command, then `run_up`)
    lock = open(path, "a+")  # noqa: SIM115 - held open for the process's lifetime
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        other = lock.read().strip() or "unknown"
        lock.close()
        raise Conflict(
            f"another `tp up` (pid {other}) is running on the state directory {settings.state_dir}",
            fix="use that one, stop it first (Ctrl-C in its terminal), or give this one another"
            " --state-dir",
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    _held = lock


def refusal(settings: Settings) -> int | None:
    """`tp up`'s exit code when ``check`` refuses the settings (the error reported), else None."""
    try:
        check(settings)
    except TunePlaneError as exc:
        logs.report(exc, stream=sys.stderr)
        return 2
    return None
