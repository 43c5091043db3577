"""Connecting to the container engine, and translating its failures once.

Every call into the Docker Engine API (Docker, or Podman's compatible service) goes through
:func:`connect` and :func:`engine_errors`, so the rest of the adapter only sees the platform's
error taxonomy: an unreachable engine is ``Unavailable``; any other engine refusal is
re-raised as :class:`EngineError` (status + message) for the caller to interpret, usually by
status (404 = missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import aiodocker
import aiohttp

from domain.errors import Unavailable

DEFAULT_DOCKER_HOST = "unix:///var/run/tuneplane-docker/docker.sock"
"""Where ``deploy/dev/dockerd.sh`` starts the private engine when ``DOCKER_HOST`` is unset."""

START_HINT = "bash deploy/dev/dockerd.sh"
CALL_TIMEOUT = aiohttp.ClientTimeout(total=120, sock_connect=10)
"""Ordinary calls; long ones (logs, stop, image import) pass their own."""
_CONNECT_STATUS = 900  # aiodocker's status for "could not connect"


class EngineError(Exception):
    """The engine answered, and refused: ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"engine said {status}: {message}")
        self.status = status
        self.message = message


def resolve_host(docker_host: str | None = None) -> str:
    """The engine address: the argument (the settings' ``DOCKER_HOST``), else
    :data:`DEFAULT_DOCKER_HOST`."""
    return docker_host or DEFAULT_DOCKER_HOST


def unavailable(host: str, detail: str) -> Unavailable:
    return Unavailable(
        f"the container engine at {host} is unreachable: {detail}",
        fix=f'start one with `eval "$({START_HINT})"`, or set DOCKER_HOST to a running '
        "Docker or Podman socket",
    )


def connect(host: str) -> aiodocker.Docker:
    """An aiodocker client for ``host`` (nothing is sent until the first call)."""
    if host.startswith("unix://") and not os.path.exists(host[len("unix://") :]):
        raise unavailable(host, "no socket at that path")
    try:
        return aiodocker.Docker(url=host, timeout=CALL_TIMEOUT)
    except ValueError as exc:
        raise unavailable(host, f"DOCKER_HOST is not usable ({exc})") from None


@contextlib.contextmanager
def engine_errors(host: str) -> Iterator[None]:
    """Translate transport failures to ``Unavailable`` and engine refusals to ``EngineError``."""
    try:
        yield
    except aiodocker.DockerError as exc:
        if exc.status == _CONNECT_STATUS:
            raise unavailable(host, str(exc.message)) from None
        raise EngineError(exc.status, str(exc.message)) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise unavailable(host, f"{type(exc).__name__}: {exc}") from None
    except TimeoutError:
        raise unavailable(host, "the engine did not answer in time") from None


async def demux_logs(content: aiohttp.StreamReader, tty: bool) -> AsyncIterator[bytes]:
    """The Engine's log stream: raw for a TTY, else frames of an 8-byte header + payload."""
    if tty:
        async for data in content.iter_any():
            yield data
        return
    while True:
        try:
            header = await content.readexactly(8)
        except asyncio.IncompleteReadError:
            return
        size = int.from_bytes(header[4:8], "big")
        if size:
            yield await content.readexactly(size)
