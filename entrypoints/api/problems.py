"""The one place where errors become HTTP answers (application/problem+json)."""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    ValidationException,
)
from litestar.openapi.datastructures import ResponseSpec

from application import log_context
from domain import errors
from entrypoints.api.schemas import Problem
from entrypoints.wire import explain

log = logging.getLogger("tuneplane.api")

PROBLEM_JSON = "application/problem+json"


class MalformedRequest(errors.InvalidInput):
    """Input no route could use (``guard.py``): refused at the edge with 400."""


STATUS: dict[type[errors.TunePlaneError], int] = {
    MalformedRequest: 400,  # before its base class: the first match wins
    errors.InvalidInput: 422,
    errors.Unauthenticated: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Expired: 410,
    errors.TooLarge: 413,
    errors.RetryKeyReused: 422,
    errors.IllegalTransition: 409,
    errors.Unavailable: 503,
}
TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable request",
    500: "Internal error",
    503: "Unavailable",
}


def problem_json(
    status: int, code: str, detail: str, fix: str = "", field: str | None = None
) -> bytes:
    """The body of a problem answer, with the id of the request being answered (bound by
    ``request_ids.traced`` around every request)."""
    rid = log_context.current().get("request_id")
    body = Problem(
        type=f"https://tuneplane.dev/errors/{code}",
        title=TITLES.get(status, "Error"),
        status=status,
        detail=detail,
        fix=fix,
        field=field,
        request_id=rid if isinstance(rid, str) else None,
    )
    return msgspec.json.encode(body)


def problem(
    status: int,
    code: str,
    detail: str,
    fix: str = "",
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[bytes]:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(
        problem_json(status, code, detail, fix, field),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _domain_error(_: Request[Any, Any, Any], exc: errors.TunePlaneError) -> Response[bytes]:
    status = next((s for t, s in STATUS.items() if isinstance(exc, t)), 400)
    if status == 503:
        log.warning("unavailable: %s", exc)
    return problem(status, exc.code, exc.message, exc.fix, exc.field)


_AT = re.compile(r"- at `\$\.?([^`]*)`")


def _validation_error(_: Request[Any, Any, Any], exc: ValidationException) -> Response[bytes]:
    """Body or parameter validation: name the field, say what was expected."""
    detail = str(exc.detail)
    field = None
    extra = exc.extra
    if isinstance(extra, list) and extra and isinstance(extra[0], dict):
        first = extra[0]
        message = str(first.get("message", detail))
        key = first.get("key")
        source = first.get("source")
        match = _AT.search(message)
        if match:
            field = match.group(1) or "body"
            message = _AT.sub("", message).strip()
        elif key:
            where = getattr(source, "value", source)  # litestar's ParamType.QUERY: "query"
            field = str(key) if where in (None, "body") else f"{where}.{key}"
        detail = explain(message)
    elif "decode" in detail.lower() or "json" in detail.lower():
        detail = f"the request body is not valid JSON: {detail}"
    if detail in ("'data'", "data"):  # litestar's words for a request without a body
        detail, field = "the request body is missing or empty", "body"
    elif field == "data":
        field = "body"
    return problem(
        400,
        "invalid-input",
        detail,
        "fix the named field; the OpenAPI document at /schema/openapi.json lists every field",
        field,
    )


def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    status = exc.status_code
    fix = {
        401: "send `Authorization: Bearer <token>`",
        404: "check the path; the API is described at /schema",
        405: "check the method; the API is described at /schema",
        413: "send a smaller body",
    }.get(status, "")
    # litestar's own headers (a 405's Allow: the methods the path has) go out with the problem
    return problem(status, "http-" + str(status), str(exc.detail), fix, headers=exc.headers)


def _unexpected(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    log.exception("unhandled error", exc_info=exc)
    return problem(
        500, "internal", "an internal error occurred", "retry; if it persists, see the server log"
    )


EXCEPTION_HANDLERS: dict[Any, Any] = {
    errors.TunePlaneError: _domain_error,
    ValidationException: _validation_error,
    NotAuthorizedException: _http_error,
    NotFoundException: _http_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}


def responses(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI declarations for the problem answers a route can give."""
    return {
        s: ResponseSpec(Problem, description=TITLES.get(s, "Error"), media_type=PROBLEM_JSON)
        for s in statuses
    }
