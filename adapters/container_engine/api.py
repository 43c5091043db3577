"""Requests to the Docker Engine API through public interfaces only.

aiodocker connects (``DOCKER_HOST``: a unix socket, TCP, TLS) and says which API version the
engine speaks (``Docker.version``); the requests themselves go through its public aiohttp
session, so nothing here depends on aiodocker's private methods. Failures come out as the
platform's: an unreachable engine is ``Unavailable``, a refusal :class:`EngineError` with the
engine's status and message (``engine.engine_errors``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiodocker
import aiohttp

from adapters.container_engine.engine import CALL_TIMEOUT, EngineError, connect, engine_errors

Params = Mapping[str, str | int | float | bool]


def http_params(params: Params | None) -> dict[str, str] | None:
    """Query parameters as the engine reads them: booleans as 1/0, numbers as text."""
    if params is None:
        return None
    return {k: ("1" if v else "0") if isinstance(v, bool) else str(v) for k, v in params.items()}


class EngineApi:
    """One engine's API; connects lazily (the engine may start after us)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._docker: aiodocker.Docker | None = None
        self._version: str | None = None

    def client(self) -> aiodocker.Docker:
        """The aiodocker client, for its public API (``images.pull``, ``version``)."""
        if self._docker is None:
            self._docker = connect(self.host)
        return self._docker

    async def close(self) -> None:
        if self._docker is not None:
            docker, self._docker = self._docker, None
            await docker.close()

    async def _url(self, path: str, versioned: bool) -> str:
        docker = self.client()
        if not versioned:
            return f"{docker.docker_host}/{path}"
        if self._version is None:
            self._version = "v" + str((await docker.version())["ApiVersion"])
        return f"{docker.docker_host}/{self._version}/{path}"

    @contextlib.asynccontextmanager
    async def request(
        self,
        path: str,
        method: str = "GET",
        *,
        params: Params | None = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        client_timeout: aiohttp.ClientTimeout = CALL_TIMEOUT,
        versioned: bool = True,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The engine's response to one request (its body unread). A dict or list ``data`` is
        sent as JSON. Raises EngineError when the engine refuses (4xx, 5xx)."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if isinstance(data, dict | list):
            data = json.dumps(data)
        with engine_errors(self.host):
            url = await self._url(path, versioned)
            async with self.client().session.request(
                method,
                url,
                params=http_params(params),
                data=data,
                headers=sent,
                timeout=client_timeout,
            ) as resp:
                if resp.status >= 400:
                    raise EngineError(resp.status, _message(await resp.read()))
                yield resp

    async def json(self, path: str, method: str = "GET", **kw: Any) -> Any:
        """The engine's JSON answer ("" when it sends no body)."""
        async with self.request(path, method, **kw) as resp:
            body = await resp.read()
        return json.loads(body) if body.strip() else ""

    async def send(self, path: str, method: str = "POST", **kw: Any) -> None:
        """A request whose answer is only its status."""
        async with self.request(path, method, **kw) as resp:
            await resp.read()


def _message(body: bytes) -> str:
    text = body.decode(errors="replace").strip()
    try:
        said = json.loads(text)
    except ValueError:
        return text
    return str(said.get("message", text)) if isinstance(said, dict) else text
