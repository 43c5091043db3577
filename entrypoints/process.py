"""What every long-running `tp` process needs, and nothing heavier (the collector starts fast).

``run_server`` runs a server coroutine, ``until_signalled`` until SIGTERM or SIGINT,
``split_server`` reads a ``HOST:PORT`` flag, ``check_listen`` checks where a server listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Coroutine
from typing import Any

from domain.errors import InvalidInput

TELEMETRY_PORT = 8472  # the telemetry gateway's default port


async def until_signalled(
    work: Coroutine[Any, Any, object],
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
) -> None:
    """Run ``work`` until one of ``signals`` (SIGTERM or SIGINT), then cancel it; an error of
    ``work`` is raised."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(work)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for task in (runner, stopper):
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
