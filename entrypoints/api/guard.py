"""What every request is checked for before a route sees it (docs/http-api.md, "Input limits").

Text that reaches the database must be text PostgreSQL can store, and a body must be one the
decoder can walk without exhausting the stack. So, on every route:

* the path and every query parameter hold no NUL character;
* a JSON body is valid JSON (msgspec already refuses unpaired surrogates such as ``"\\ud800"``
  and numbers past float range), nested at most :data:`MAX_DEPTH` levels, with no NUL character
  in any string or key and no integer outside signed 64 bits.

A refusal is a 400 problem naming the field (``params.command``, ``query.owner``) and the fix,
raised before any use case runs: nothing is written. Body size is bounded per route
(``request_max_body_size``; 1 MiB unless a route says otherwise).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qsl

import msgspec
from litestar import Litestar, Request
from litestar.enums import ScopeType
from litestar.exceptions import SerializationException
from litestar.routes import HTTPRoute
from litestar.serialization import decode_json
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    LifeSpanReceive,
    LifeSpanScope,
    LifeSpanSend,
    Receive,
    Scope,
    Send,
)
from litestar.types.empty import Empty

from domain.errors import InvalidInput
from entrypoints.api.schemas import Problem

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class MalformedRequest(InvalidInput):
    """Input no route could use: refused at the edge with 400 (``problems.py``)."""


def _printable(key: str) -> str:
    return key.replace("\x00", "\\x00")


def check_text(text: str, field: str) -> None:
    if "\x00" in text:
        raise MalformedRequest(
            f"{field} holds a NUL character (\\x00), which text fields cannot hold",
            fix="remove it; send text without NUL characters",
            field=field,
        )


def _join(path: str, key: str) -> str:
    return key if path == "body" else f"{path}.{key}"


def check_json(value: object, root: str = "body") -> None:
    """Raise MalformedRequest at the first value of a decoded JSON body that breaks the rules
    above; iterative, so that a deep value cannot exhaust the stack here either."""
    stack: list[tuple[object, str, int]] = [(value, root, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise MalformedRequest(
                    f"{path} is {item}, outside the signed 64-bit range",
                    fix=f"send an integer between {INT_MIN} and {INT_MAX}",
                    field=path,
                )
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                _too_deep(path)
            if isinstance(item, dict):
                for key, inner in item.items():
                    where = _join(path, _printable(str(key)))
                    check_text(str(key), where)
                    stack.append((inner, where, depth + 1))
            else:
                stack.extend((inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(item))


def _too_deep(field: str) -> None:
    raise MalformedRequest(
        f"the request body is nested more than {MAX_DEPTH} levels deep",
        fix="send a flatter document; no field of this API nests that deep",
        field=field,
    )


class GuardedRequest(Request[Any, Any, Any]):
    """litestar's request, whose JSON body is checked (``check_json``) once decoded."""

    async def json(self) -> Any:
        if self._json is Empty and self._connection_state.json is Empty:
            body = await self.body()
            try:
                value = decode_json(
                    body or b"null", type_decoders=self.route_handler.resolve_type_decoders()
                )
            except RecursionError:
                _too_deep("body")
            except SerializationException as exc:
                raise MalformedRequest(
                    f"the request body is not valid JSON: {exc.detail or exc}",
                    fix="send a JSON document (UTF-8; numbers within float range; "
                    "no unpaired surrogates)",
                    field="body",
                ) from None
            check_json(value)
            self._json = self._connection_state.json = value
        return await super().json()


def guard_query_and_path(app: ASGIApp) -> ASGIApp:
    """ASGI middleware (after routing): refuse a NUL character in the path or in any query
    parameter; answer OPTIONS with every method of the path."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP:
            check_text(scope["path"], "path")
            query = scope.get("query_string", b"")
            if b"%00" in query or b"\x00" in query:
                pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
                for key, value in pairs:
                    check_text(key, f"query.{_printable(key)}")
                    check_text(value, f"query.{_printable(key)}")
            if scope["method"] == "OPTIONS":
                await _options(scope, send)
                return
        await app(scope, receive, send)

    return guarded


class GuardedLitestar(Litestar):
    """litestar, except that an API path with an empty segment (``/v1/jobs//cancel``, a
    trailing ``/``: an empty path parameter) is 404 before routing, instead of being routed as
    the path without it (``/v1/jobs/cancel``: the job named "cancel"; ``/v1/jobs/``: the
    list)."""

    async def __call__(
        self,
        scope: Scope | LifeSpanScope,
        receive: Receive | LifeSpanReceive,
        send: Send | LifeSpanSend,
    ) -> None:
        if scope["type"] == ScopeType.HTTP:
            http = cast(Scope, scope)
            raw: bytes = http.get("raw_path") or http["path"].encode()
            if raw.startswith(b"/v1/") and (b"//" in raw or raw.endswith(b"/")):
                await _send(cast(Send, send), 404, problem_body(404, raw.decode("latin-1")))
                return
        await super().__call__(scope, receive, send)


def problem_body(status: int, path: str) -> bytes:
    return msgspec.json.encode(
        Problem(
            type="https://tuneplane.dev/errors/not-found",
            title="Not found",
            status=status,
            detail=f"no resource at {path}: a path segment is empty",
            fix="fill in every path parameter (and leave out a trailing slash)",
            field="path",
        )
    )


async def _send(send: Send, status: int, body: bytes) -> None:
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/problem+json")],
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)


async def _options(scope: Scope, send: Send) -> None:
    """204 with ``Allow``: litestar's own OPTIONS answer lists only the methods of the first
    handler registered for a path."""
    app = Litestar.from_scope(scope)
    template = scope.get("path_template")
    methods = {"OPTIONS"}
    for route in app.routes:
        if isinstance(route, HTTPRoute) and route.path_format == template:
            methods |= set(route.methods)
    allow = ", ".join(sorted(methods)).encode()
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": 204,
        "headers": [(b"allow", allow)],
    }
    body: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}
    await send(start)
    await send(body)
