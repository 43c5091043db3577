"""A small synchronous client of the HTTP API (docs/http-api.md), on the standard library's
``http.client``.

Every HTTP or connection failure leaves here as a ``domain.errors`` error (see ``errors``), so
commands never see the transport's exceptions. ``with_retries`` re-sends a request that failed
transiently (connection error, timeout, 5xx): callers use it only where re-sending is safe,
e.g. a commit that carries the same retry key.

Why not httpx (which this was until session 50): importing it and making its client was 0.1 s
of CPU of every `tp` command's 0.4 on a slow core, a quarter of a short command, and what the
CLI needs of HTTP is small: one server, HTTP/1.1, JSON and streamed bodies, timeouts, and the
proxies the environment names (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, as
curl and httpx read them; docs/cli.md). One connection is kept alive between the requests of a
command, and dropped when the server closed it or an answer was not read to its end.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import select
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from domain.documents import NestedTooDeeply, json_loads
from domain.errors import InvalidInput, TunePlaneError, Unavailable
from entrypoints.cli import output
from entrypoints.cli.config import Credentials, check_token, load_credentials, refuse_user_info
from entrypoints.cli.errors import ServerError, from_problem, is_transient

if TYPE_CHECKING:
    from entrypoints.cli.proxies import Proxy

T = TypeVar("T")


@dataclass(frozen=True)
class Timeout:
    """Seconds to connect, and to wait for each read or write after (None: for ever)."""

    read: float | None
    connect: float = 10.0


TIMEOUT = Timeout(30.0)
UPLOAD_TIMEOUT = Timeout(300.0)
STREAM_TIMEOUT = Timeout(None)  # a followed log may stay quiet for long

RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
_sleep: Callable[[float], None] = time.sleep  # tests replace it

Headers = Message  # an answer's headers: ``get`` ignores the name's case


@dataclass(frozen=True)
class Response:
    """An answer read to its end."""

    method: str
    path: str
    status_code: int
    headers: Headers
    content: bytes

    def json(self) -> Any:
        return json_loads(self.content, walk=False)


class Api:
    """One server, one token. Use as a context manager so the connection is closed."""

    def __init__(self, server: str, token: str) -> None:
        refuse_user_info(server, "given to the client")  # never stored, shown or sent
        check_token(token, "given to the client")
        self.server = server.rstrip("/")
        url = urlsplit(self.server)
        scheme = url.scheme.lower()
        try:
            port = url.port
            host = (url.hostname or "").encode("idna").decode("ascii")  # a name's ASCII form
        except (ValueError, UnicodeError):  # a port out of range or not a number, a bad name
            host = ""
        if scheme not in ("http", "https") or not host:
            raise InvalidInput(
                f"the server {self.server!r} is not an http:// or https:// URL with a valid"
                " host and port",
                fix="give the URL `tp up` printed, e.g. `tp login --server http://127.0.0.1:8470`",
            )
        self._https = scheme == "https"
        self._host, self._port = host, port or (443 if self._https else 80)
        authority = f"[{host}]" if ":" in host else host
        self._origin = f"{scheme}://{authority}" + (f":{port}" if port else "")
        self._base = url.path
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "tuneplane-cli"}
        self._proxy = _proxy_for(scheme, host, self._port)
        self._conn: http.client.HTTPConnection | None = None

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _unreachable(self, exc: Exception) -> Unavailable:
        self.close()  # whatever state it was left in, the connection is not used again
        what = "did not answer in time" if isinstance(exc, TimeoutError) else "failed"
        reason = exc or type(exc).__name__
        if self._proxy is not None:  # the proxy may be what failed: name it and its variables
            return Unavailable(
                f"connection to {self.server} through the proxy {self._proxy.url} {what}: {reason}",
                fix="check that the proxy is running and reaches the server, or name the server"
                " in NO_PROXY (the proxy comes from HTTP_PROXY/HTTPS_PROXY/ALL_PROXY)",
            )
        return Unavailable(
            f"connection to {self.server} {what}: {reason}",
            fix="check that the server is running (`tp up`) and that `tp login --server` names it",
        )

    def _connection(self, timeout: Timeout) -> tuple[http.client.HTTPConnection, bool]:
        """The connection to send on, and whether it was kept from an earlier request."""
        conn = self._conn
        if conn is not None and conn.sock is not None and _closed_by_peer(conn.sock):
            self.close()  # the server ended the idle connection (its keep-alive ran out)
            conn = None
        if conn is None:
            conn = self._conn = self._new_connection(timeout.connect)
        kept = conn.sock is not None
        if not kept:
            conn.timeout = timeout.connect
            conn.connect()
        conn.sock.settimeout(timeout.read)
        return conn, kept

    def _new_connection(self, connect: float) -> http.client.HTTPConnection:
        proxy = self._proxy
        if proxy is None:
            if self._https:
                return http.client.HTTPSConnection(
                    self._host, self._port, timeout=connect, context=ssl.create_default_context()
                )
            return http.client.HTTPConnection(self._host, self._port, timeout=connect)
        if not self._https:  # the proxy is asked for the absolute URL (``_target``)
            return http.client.HTTPConnection(proxy.host, proxy.port, timeout=connect)
        from entrypoints.cli.proxies import TunnelConnection

        tls = ssl.create_default_context()
        return TunnelConnection(proxy, self._host, self._port, connect, tls)

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        target = self._base + path
        if params:
            target += "?" + urlencode(_query(params))
        if self._proxy is not None and not self._https:
            return self._origin + target
        return target

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: bytes | Iterable[bytes] | None,
        headers: Mapping[str, str],
        timeout: Timeout,
    ) -> http.client.HTTPResponse:
        sent = {**self._headers, **headers}
        if self._proxy is not None and not self._https:
            sent.update(self._proxy.headers)
        target = self._target(path, params)
        try:
            conn, kept = self._connection(timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None
        failed: OSError | None = None
        try:
            conn.request(method, target, body=body, headers=sent)
        except OSError as exc:
            # A server may answer before it has read the whole body (an upload refused as too
            # large or not allowed) and close: that answer, not the broken send, is the outcome.
            failed = exc
        except http.client.HTTPException as exc:
            raise self._unreachable(exc) from None
        try:
            return conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            if kept and method == "GET" and isinstance(exc, _STALE):
                self.close()  # the server closed the kept connection as it was reused: once more
                return self._send(method, path, params, body, headers, timeout)
            raise self._unreachable(failed or exc) from None

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = TIMEOUT,
    ) -> Response:
        """Send one request; raise the domain error for a connection failure or an error status."""
        sent = dict(headers or {})
        if json is not None:  # encoded here: NaN and infinity are not JSON
            content = _encode(json)
            sent["Content-Type"] = "application/json"
        elif content is None and method in ("POST", "PUT", "PATCH"):
            content = b""  # an empty body says so (Content-Length: 0)
        resp = self._send(method, path, params, content, sent, timeout)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None
        if resp.will_close:
            self.close()
        if resp.status >= 400:
            raise from_problem(resp.status, resp.headers.get("content-type", ""), data, self.server)
        return Response(method, path, resp.status, resp.headers, data)

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
    ) -> Iterator[tuple[Headers, Iterator[bytes]]]:
        """As ``stream``, with the answer's headers (a download's size and digest);
        ``first_byte``: how long the server may take to start answering, seconds, when that
        is longer than an upload's timeout (a file fetched from a node first)."""
        read = max(UPLOAD_TIMEOUT.read or 0.0, first_byte + 30.0)
        with self._opened(path, params, Timeout(read)) as opened:
            yield opened

    @contextmanager
    def _opened(
        self, path: str, params: Mapping[str, Any] | None, timeout: Timeout
    ) -> Iterator[tuple[Headers, Iterator[bytes]]]:
        resp = self._send("GET", path, params, None, {}, timeout)
        try:
            if resp.status >= 400:
                data = self._read(resp)
                ctype = resp.headers.get("content-type", "")
                raise from_problem(resp.status, ctype, data, self.server)
            yield resp.headers, self._chunks(resp)
        finally:
            if not resp.isclosed() or resp.will_close:
                resp.close()  # it holds the socket when the server said it would close
                self.close()  # a body left unread would be read as the next answer

    def _read(self, resp: http.client.HTTPResponse) -> bytes:
        try:
            return resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None

    def _chunks(self, resp: http.client.HTTPResponse) -> Iterator[bytes]:
        try:
            while chunk := resp.read1(CHUNK):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from None


CHUNK = 64 * 1024
# how a kept-alive connection the server had just closed fails the request sent on it
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def _closed_by_peer(sock: Any) -> bool:
    """An idle kept-alive socket that is readable was closed by the server (or sent what no
    request asked for): either way not one to send the next request on."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _query(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query pairs as httpx wrote them before: a list or tuple as the name repeated, booleans
    in lower case, None as empty."""
    pairs = []
    for name, value in params.items():
        for one in value if isinstance(value, list | tuple) else (value,):
            text = "" if one is None else str(one)
            pairs.append((name, text.lower() if isinstance(one, bool) else text))
    return pairs


def _proxy_for(scheme: str, host: str, port: int) -> Proxy | None:
    """The proxy the environment names for the server (``proxies.py``); None for none."""
    # the standard variables of every HTTP client, not TunePlane's settings; read here so that
    # the common case, no proxy, costs no import of urllib.request
    names = ("http_proxy", "https_proxy", "all_proxy")
    if not any(k.lower() in names for k in os.environ):  # noqa: TID251
        return None
    from entrypoints.cli.proxies import proxy_for

    return proxy_for(scheme, host, port)


def _encode(body: Any) -> bytes:
    try:
        return json.dumps(body, allow_nan=False).encode()
    except ValueError:
        raise InvalidInput(
            "a number given is not finite (nan or inf)", fix="give a finite number"
        ) from None


def _json(resp: Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        what = "JSON nested too deeply" if isinstance(exc, NestedTooDeeply) else "not JSON"
        raise ServerError(
            f"{resp.method} {resp.path} answered {resp.status_code} with a body that is {what}",
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
