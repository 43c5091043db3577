"""HEAD answered wherever GET is (RFC 9110 §9.3.2: a server that supports GET supports HEAD):
the GET route runs and its status and headers go out, never its body.

Litestar routes HEAD only to handlers that declare it, and answers 405 elsewhere; a load
balancer's health check (`HEAD /healthz`) and tools that probe a URL ask for it. This wraps the
whole ASGI app, outside routing, as ``instrumented`` does. The GET route's work is done (a
HEAD of a list costs what its GET costs) and its answer stops at the headers: a streamed
body (a followed log) is not waited for, the route is ended when its headers are out."""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send


class _HeadersSent(BaseException):
    """Ends the GET route once a HEAD's headers are out. A BaseException, as cancellation is,
    so that no handler for errors takes it for the route's failure and answers again."""


def head_as_get(app: ASGIApp) -> ASGIApp:
    """``app`` with each HEAD request run as its GET and answered without a body."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["method"] != "HEAD":
            await app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] != "http.response.start":
                return  # trailers or a body after the end: nothing more goes out
            await send(message)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            raise _HeadersSent

        try:
            await app({**scope, "method": "GET"}, receive, headers_only)
        except* _HeadersSent:  # alone, or from a task group the route ran in
            pass

    return wrapped
