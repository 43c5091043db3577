"""What every long-running `tp` process needs, and nothing heavier (the collector starts fast).

``run_server`` runs a server coroutine, ``until_signalled`` until SIGTERM or SIGINT (or, for a
supervised child, until its parent is gone), ``announce_ready`` tells the supervisor that
started it that it serves, ``split_server`` reads a ``HOST:PORT`` flag, ``check_listen`` checks
where a server listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Coroutine
from typing import Any

from adapters.child_env import forget
from domain.errors import InvalidInput
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import SupervisionSettings

TELEMETRY_PORT = 8472  # the telemetry gateway's default port
PARENT_ENV = "TUNEPLANE_PARENT_PID"  # set by entrypoints.supervise.spawn_logged
READY_ENV = "TUNEPLANE_READY_FILE"  # where a supervised child says it serves
PARENT_CHECK_SECONDS = 1.0


def announce_ready() -> None:
    """Write this process's pid to ``$TUNEPLANE_READY_FILE`` (if set) once it serves: `tp up`
    prints a listener's address only after its own child said so (a port that answers may be
    another process's)."""
    path = load_one(SupervisionSettings, "ready_file")
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(tmp, path)


async def _parent_gone(parent: int) -> None:
    """Return once this process's parent is no longer ``parent`` (the fallback of
    ``PR_SET_PDEATHSIG``: the child is re-parented when its supervisor dies)."""
    while os.getppid() == parent:  # noqa: ASYNC110 - nothing to wait on but the kernel's view
        await asyncio.sleep(PARENT_CHECK_SECONDS)


async def until_signalled(
    work: Coroutine[Any, Any, object],
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
) -> None:
    """Run ``work`` until one of ``signals`` (SIGTERM or SIGINT), or until the parent named by
    ``$TUNEPLANE_PARENT_PID`` is gone, then cancel it; an error of ``work`` is raised. The
    variable is taken out of this process's environment: it names *this* process's supervisor,
    never that of a process this one starts."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(work)
    stoppers: list[asyncio.Task[object]] = [asyncio.create_task(stop.wait())]
    parent = load_one(SupervisionSettings, "parent_pid")
    forget(PARENT_ENV)
    if parent is not None:
        stoppers.append(asyncio.create_task(_parent_gone(parent)))
    done, _ = await asyncio.wait({runner, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    for task in (runner, *stoppers):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if runner in done:
        runner.result()


def run_server(coro: Coroutine[Any, Any, None]) -> None:
    """Run a server coroutine on uvloop where installed (a faster event loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def split_server(
    server: str, flag: str = "--server", what: str = "the node gateway", example: int = 8471
) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[v6]:PORT``) → (host, port), with an error that shows the form."""
    host, sep, port = server.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(
            f"{flag} {server!r} is not HOST:PORT",
            fix=f"pass {what}'s address, e.g. {flag} gateway.example.org:{example}",
            field=flag.removeprefix("--").replace("-", "_"),
        )
    return host, int(port)


def require_database(database_url: str | None) -> str:
    """The database URL; a clear error without one (before the container's resources, which
    all need it, start failing at once, and before a server's modules load)."""
    if not database_url:
        raise InvalidInput(
            "no database configured",
            fix="set TUNEPLANE_DATABASE_URL, or use `tp up`, which starts a private PostgreSQL",
        )
    return database_url


def check_listen(host: str, port: int, where: str) -> None:
    """A clear error, before anything starts, for an address a server cannot listen on: a port
    outside 1 to 65535, or a host that is neither an address nor a name that resolves. ``where``
    names the settings, e.g. "--host/--port or TUNEPLANE_HTTP_HOST/_PORT"."""
    if not 0 < port < 65536:
        raise InvalidInput(
            f"port {port} is out of range", fix=f"give 1 to 65535 ({where})", field="port"
        )
    try:
        socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise InvalidInput(
            f"cannot listen on {host!r}: {why}",
            fix=f"give an address of this machine, e.g. 127.0.0.1 or 0.0.0.0 ({where})",
            field="host",
        ) from None
