"""The API's own metrics (docs/operations.md#metrics): every request counted and timed by its
route *template* (``/v1/jobs/{job_id}``, never the raw path: no id reaches a label), method
and status class, and ``GET /metrics``, the process's registry in Prometheus' text format.

``instrumented`` wraps the whole ASGI app, outside routing, so a 404 and a refused path are
counted too (as route ``unmatched``); a streamed answer is timed to its first byte."""

from __future__ import annotations

import time
from typing import Any

from litestar import Response, get
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from adapters.observability.prometheus import CONTENT_TYPE, process_instruments
from application import instruments as i
from entrypoints.api.security import SECURITY, Caller

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def instrumented(app: ASGIApp) -> ASGIApp:
    """``app`` with its HTTP requests counted and timed in this process's registry."""
    measure = process_instruments()

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # an exception that escapes every handler is answered 500 by the server
        timed = False

        def route() -> str:
            template = scope.get("path_template")  # set by the router once a route matched
            return str(template) if template else UNMATCHED

        async def sending(message: Message) -> None:
            nonlocal status, timed
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if not timed:
                    timed = True
                    measure.observe(i.HTTP_SECONDS, time.perf_counter() - start, route=route())
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            measure.inc(
                i.HTTP_REQUESTS, route=route(), method=_method(scope), status=f"{status // 100}xx"
            )

    return wrapped


def _method(scope: Scope) -> str:
    method = str(scope.get("method", "GET"))
    return method if method in METHODS else "other"  # bounded: a label never takes any text


def metrics_route(mode: str) -> list[Any]:
    """``GET /metrics`` as TUNEPLANE_API_METRICS says: open, behind any API token, or none."""
    if mode == "off":
        return []
    if mode == "token":

        @get("/metrics", include_in_schema=False, security=SECURITY)
        async def metrics_with_token(principal: Caller) -> Response[bytes]:  # any valid token
            return _exposition()

        return [metrics_with_token]

    @get("/metrics", include_in_schema=False)
    async def metrics_open() -> Response[bytes]:
        return _exposition()

    return [metrics_open]


def _exposition() -> Response[bytes]:
    return Response(process_instruments().exposition(), media_type=CONTENT_TYPE)
