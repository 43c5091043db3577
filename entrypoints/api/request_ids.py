"""Every API request's id, and the ids its path names, on every log line of the request
(docs/operations.md#logs).

The id is the client's ``X-Request-Id`` when it is sane (1 to 128 characters of letters,
digits and ``._:@+/-``: nothing that could break a log line or pass for another field), else a
new one; the response carries it back in ``X-Request-Id`` (problem answers included). A path
under ``/v1/jobs/{id}`` binds the job's id, one under ``/v1/nodes/{name}`` the node's. A
problem answer (status 400 or more) is logged once, with its status, code and detail (INFO
below 500, WARNING from 500), so that the id a user quotes finds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator

import msgspec
from litestar.types import Message, Scope, Send

from application.log_context import bound

HEADER = b"x-request-id"
_SANE = re.compile(r"[A-Za-z0-9._:@+/-]{1,128}")
_NAMED = re.compile(r"/v1/(jobs|nodes)/([A-Za-z0-9._:@+-]{1,128})(?:/|$)")
_SHOWN = 200  # characters of a path or a detail in a log line

log = logging.getLogger("tuneplane.api")


def request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` if sane (the first one sent), else a new id."""
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            given = value.decode("latin-1")
            return given if _SANE.fullmatch(given) else _new()
    return _new()


def _new() -> str:
    return os.urandom(16).hex()  # 128 random bits, as a UUID4's 122, without building one


@contextlib.contextmanager
def traced(scope: Scope, send: Send) -> Iterator[Send]:
    """Within the block, log lines carry the request's ids; the ``send`` it gives answers with
    ``X-Request-Id`` and logs a problem answer."""
    rid = request_id(scope)
    named = _NAMED.match(scope.get("path", ""))
    job = named.group(2) if named and named.group(1) == "jobs" else None
    node = named.group(2) if named and named.group(1) == "nodes" else None
    header = (HEADER, rid.encode())
    status = 0
    logged = False

    async def answer(message: Message) -> None:
        nonlocal status, logged
        if message["type"] == "http.response.start":
            status = message["status"]
            message = {**message, "headers": [*message.get("headers", ()), header]}
        elif message["type"] == "http.response.body" and status >= 400 and not logged:
            logged = True
            _log_problem(scope, status, message.get("body", b""))
        await send(message)

    with bound(request_id=rid, job_id=job, node=node):
        yield answer


def _log_problem(scope: Scope, status: int, body: bytes) -> None:
    code, detail = "", ""
    with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError):
        problem = msgspec.json.decode(body[:65536]) if body else {}
        code = str(problem.get("type", "")).rsplit("/", 1)[-1]
        detail = str(problem.get("detail", ""))
    path = scope.get("path", "")
    log.log(
        logging.INFO if status < 500 else logging.WARNING,
        "%s %s answered %d %s%s",
        scope.get("method", ""),
        path if len(path) <= _SHOWN else path[:_SHOWN] + "…",
        status,
        code,
        f": {detail[:_SHOWN]}" if detail else "",
    )
