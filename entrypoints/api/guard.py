"""What every request is checked for before a route sees it (docs/http-api.md, "Input limits").

Text that reaches the database must be text PostgreSQL can store, and a body must be one the
decoder can walk without exhausting the stack. So, on every route:

* the path and every query parameter hold no NUL character;
* a JSON body is valid JSON (msgspec already refuses unpaired surrogates such as ``"\\ud800"``
  and numbers past float range), nested at most :data:`MAX_DEPTH` levels, with no NUL character
  in any string or key and no integer outside signed 64 bits.

The rules for text and for a body are the domain's (``domain/input_limits.py``), which
`tp validate` applies to experiment.toml too. A refusal is a 400 problem naming the field
(``params.command``, ``query.owner``) and the fix, raised before any use case runs: nothing is
written. Body size is bounded per route (``request_max_body_size``; 1 MiB unless a route says
otherwise). The path and the query are checked before routing (``GuardedLitestar``, which also
answers a path with an empty segment and OPTIONS), a JSON body once decoded
(``GuardedRequest``).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qsl

from litestar import Litestar, Request
from litestar.enums import ScopeType
from litestar.exceptions import MethodNotAllowedException, NotFoundException, SerializationException
from litestar.routes import HTTPRoute
from litestar.serialization import decode_json
from litestar.types import (
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
from litestar.utils import normalize_path

from domain import input_limits
from domain.errors import InvalidInput
from domain.input_limits import printable
from entrypoints.api.problems import PROBLEM_JSON, MalformedRequest, problem_json
from entrypoints.api.request_ids import traced

MAX_DEPTH = input_limits.MAX_DEPTH


def check_text(text: str, field: str) -> None:
    """A NUL in ``text``: MalformedRequest (400), as ``domain.input_limits.check_text``."""
    try:
        input_limits.check_text(text, field)
    except InvalidInput as exc:
        raise _malformed(exc) from None


def check_json(value: object, root: str = "body") -> None:
    """Raise MalformedRequest at the first value of a decoded JSON body that breaks the rules
    of ``domain.input_limits.check_value`` (the ones `tp validate` applies too)."""
    try:
        input_limits.check_value(value, root)
    except InvalidInput as exc:
        raise _malformed(exc) from None


def _malformed(exc: InvalidInput) -> MalformedRequest:
    return MalformedRequest(exc.message, fix=exc.fix, field=exc.field)


def _too_deep(field: str) -> None:
    raise _malformed(input_limits.too_deep(field))


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


class GuardedLitestar(Litestar):
    """litestar, with the checks of the path and the query made before routing (one place, no
    middleware layer on every request):

    * every request gets its id, bound for its log lines and sent back in ``X-Request-Id``
      (``request_ids.traced``; its problem answers are logged);
    * a NUL character in the path or in a query parameter is 400;
    * an API path with an empty segment (``/v1/jobs//cancel``, a trailing ``/``: an empty path
      parameter) is 404, instead of being routed as the path without it (``/v1/jobs/cancel``:
      the job named "cancel"; ``/v1/jobs/``: the list);
    * OPTIONS answers 204 with ``Allow`` listing every method of the path (litestar's own
      answer lists only those of the first handler registered for it)."""

    async def __call__(
        self,
        scope: Scope | LifeSpanScope,
        receive: Receive | LifeSpanReceive,
        send: Send | LifeSpanSend,
    ) -> None:
        if scope["type"] == ScopeType.HTTP:
            http = cast(Scope, scope)
            with traced(http, cast(Send, send)) as out:  # its ids on its log lines and answer
                await self._http(http, cast(Receive, receive), out)
            return
        await super().__call__(scope, receive, send)

    async def _http(self, http: Scope, receive: Receive, out: Send) -> None:
        try:
            refused = _check_path_and_query(http)
        except MalformedRequest as exc:
            body = problem_json(400, exc.code, exc.message, exc.fix, exc.field)
            await _send(out, 400, body)
            return
        if refused is not None:
            await _send(out, 404, refused)
            return
        if http.get("method") == "OPTIONS" and await self._options(http, out):
            return
        await super().__call__(http, receive, out)

    async def _options(self, scope: Scope, send: Send) -> bool:
        try:
            template = self.asgi_router.handle_routing(normalize_path(scope["path"]), "OPTIONS")[4]
        except (NotFoundException, MethodNotAllowedException):
            return False  # litestar answers
        methods = {"OPTIONS"}
        for route in self.routes:
            if isinstance(route, HTTPRoute) and route.path_format == template:
                methods |= set(route.methods)
        start: HTTPResponseStartEvent = {
            "type": "http.response.start",
            "status": 204,
            "headers": [(b"allow", ", ".join(sorted(methods)).encode())],
        }
        await send(start)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True


def _check_path_and_query(scope: Scope) -> bytes | None:
    """Raise MalformedRequest at a NUL; the 404 body for a path with an empty segment."""
    check_text(scope["path"], "path")
    query: bytes = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            check_text(key, f"query.{printable(key)}")
            check_text(value, f"query.{printable(key)}")
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    if raw.startswith(b"/v1/") and (b"//" in raw or raw.endswith(b"/")):
        path = raw.decode("latin-1")
        return problem_json(
            404,
            "not-found",
            f"no resource at {path}: a path segment is empty",
            "fill in every path parameter (and leave out a trailing slash)",
            "path",
        )
    return None


async def _send(send: Send, status: int, body: bytes) -> None:
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", PROBLEM_JSON.encode())],
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)
