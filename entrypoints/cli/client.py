"""A small synchronous client of the HTTP API (docs/http-api.md), built on httpx.

Every HTTP or connection failure leaves here as a ``domain.errors`` error (see ``errors``), so
commands never see httpx exceptions. ``with_retries`` re-sends a request that failed
transiently (connection error, timeout, 5xx): callers use it only where re-sending is safe,
e.g. a commit that carries the same retry key.
"""

from __future__ import annotations

import json
import random
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from domain.errors import InvalidInput, TunePlaneError, Unavailable
from entrypoints.cli import output
from entrypoints.cli.config import Credentials, load_credentials
from entrypoints.cli.errors import ServerError, from_problem, is_transient

T = TypeVar("T")

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
UPLOAD_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)  # a followed log may stay quiet for long

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
_sleep: Callable[[float], None] = time.sleep  # tests replace it


class Api:
    """One server, one token. Use as a context manager so the connection pool is closed."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._client = httpx.Client(
            base_url=self.server,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "tuneplane-cli"},
            timeout=TIMEOUT,
            transport=transport,
            verify=_trust(self.server),
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _unreachable(self, exc: httpx.TransportError) -> Unavailable:
        what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "failed"
        return Unavailable(
            f"connection to {self.server} {what}: {exc or type(exc).__name__}",
            fix="check that the server is running (`tp up`) and that `tp login --server` names it",
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send one request; raise the domain error for a connection failure or an error status."""
        if "json" in kwargs:  # encoded here: NaN and infinity are not JSON
            kwargs["content"] = _encode(kwargs.pop("json"))
            headers = kwargs.get("headers") or {}
            kwargs["headers"] = {"Content-Type": "application/json", **headers}
        try:
            resp = self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if resp.status_code >= 400:
            raise from_problem(resp.status_code, resp.headers.get("content-type", ""), resp.content)
        return resp

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return _json(self.request("GET", path, params=params))

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        resp = self.request("POST", path, json=body)
        return resp.status_code, _json(resp) if resp.content else None

    def upload(self, path: str, chunks: Iterable[bytes], size: int, digest: str) -> Any:
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size),
            "X-Content-Digest": digest,
        }
        resp = self.request("POST", path, content=chunks, headers=headers, timeout=UPLOAD_TIMEOUT)
        return _json(resp)

    @contextmanager
    def stream(
        self, path: str, params: Mapping[str, Any] | None = None
    ) -> Iterator[Iterator[bytes]]:
        """Yield an iterator over the body's bytes as they arrive."""
        with self._opened(path, params, STREAM_TIMEOUT) as (_, chunks):
            yield chunks

    @contextmanager
    def download(
        self, path: str, params: Mapping[str, Any] | None = None, first_byte: float = 0.0
    ) -> Iterator[tuple[httpx.Headers, Iterator[bytes]]]:
        """As ``stream``, with the answer's headers (a download's size and digest);
        ``first_byte``: how long the server may take to start answering, seconds, when that
        is longer than an upload's timeout (a file fetched from a node first)."""
        read = max(UPLOAD_TIMEOUT.read or 0.0, first_byte + 30.0)
        with self._opened(path, params, httpx.Timeout(read, connect=10.0)) as opened:
            yield opened

    @contextmanager
    def _opened(
        self, path: str, params: Mapping[str, Any] | None, timeout: httpx.Timeout
    ) -> Iterator[tuple[httpx.Headers, Iterator[bytes]]]:
        try:
            with self._client.stream("GET", path, params=params, timeout=timeout) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise from_problem(
                        resp.status_code, resp.headers.get("content-type", ""), resp.content
                    )
                yield resp.headers, self._chunks(resp)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _chunks(self, resp: httpx.Response) -> Iterator[bytes]:
        try:
            yield from resp.iter_bytes()
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None


def _trust(server: str) -> ssl.SSLContext | bool:
    """The system's trust store for an https server; for a plain-http one, a TLS context that
    trusts no one: loading the store is about 50 ms of a 400 ms command's CPU on a slow core,
    and a client that follows no redirects never leaves its base URL's scheme."""
    if server.lower().startswith("https://"):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, with no CA: fails closed


def _encode(body: Any) -> bytes:
    try:
        return json.dumps(body, allow_nan=False).encode()
    except ValueError:
        raise InvalidInput(
            "a number given is not finite (nan or inf)", fix="give a finite number"
        ) from None


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except (ValueError, json.JSONDecodeError):
        raise ServerError(
            f"{resp.request.method} {resp.request.url.path} answered {resp.status_code} "
            f"with a body that is not JSON",
            fix="check that --server names a TunePlane control plane (`tp login`)",
        ) from None


def seg(name: str) -> str:
    """``name`` as one URL path segment; an empty name is refused (it would name the list)."""
    if not name.strip():
        raise InvalidInput(
            f"an empty name ({name!r}) names nothing",
            fix="give the name (see the matching `ls` command)",
        )
    return quote(name, safe="")


def connect(creds: Credentials | None = None) -> Api:
    """An Api for the logged-in server (raises the `tp login` hint when there is no login)."""
    creds = creds or load_credentials()
    return Api(creds.server, creds.token)


def with_retries(call: Callable[[], T], what: str, attempts: int | None = None) -> T:
    """Run ``call``; on a transient error wait (exponential backoff, jitter) and run it again."""
    attempts = attempts or RETRY_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except TunePlaneError as exc:
            if not is_transient(exc) or attempt == attempts:
                raise
            delay = min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2 ** (attempt - 1))
            delay *= 0.5 + random.random() / 2
            output.warn(
                f"{what}: {exc.message}; retrying in {delay:.1f}s (try {attempt + 1}/{attempts})"
            )
            _sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
