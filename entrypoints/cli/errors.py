"""The CLI's one mapping of errors: problem+json → domain error → exit code and stderr text.

Every expected failure is a ``domain.errors.TunePlaneError``; ``main.run`` renders it with
``render`` and exits with ``exit_code``. Nothing else in the CLI decides an exit code.
"""

from __future__ import annotations

import json
from typing import Any

from domain.errors import (
    Conflict,
    Expired,
    Forbidden,
    InvalidInput,
    NotFound,
    RetryKeyReused,
    TooLarge,
    TunePlaneError,
    Unauthenticated,
    Unavailable,
)

OK = 0
FAILED = 1  # an unexpected error, a server bug, or a job that ended without succeeding
USAGE = 2  # bad command line or invalid input (cyclopts also exits 2 on a parse error)
NOT_FOUND = 3
CONFLICT = 4  # conflict or expired (e.g. a stale preview)
AUTH = 5  # unauthenticated or forbidden
UNAVAILABLE = 6  # server unreachable or answering 503
INTERRUPTED = 130


class ServerError(TunePlaneError):
    """The server failed (HTTP 5xx other than 503) or answered something unreadable."""

    code = "server-error"


_EXIT_CODES: tuple[tuple[type[TunePlaneError], int], ...] = (
    (InvalidInput, USAGE),
    (RetryKeyReused, USAGE),
    (TooLarge, USAGE),
    (NotFound, NOT_FOUND),
    (Conflict, CONFLICT),
    (Expired, CONFLICT),
    (Unauthenticated, AUTH),
    (Forbidden, AUTH),
    (Unavailable, UNAVAILABLE),
)

_BY_STATUS: dict[int, type[TunePlaneError]] = {
    400: InvalidInput,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Expired,
    413: TooLarge,
    422: InvalidInput,
    503: Unavailable,
}


def _by_code() -> dict[str, type[TunePlaneError]]:
    """Error classes by code; the taxonomy's own class wins over an adapter's subclass that
    shares its code (e.g. EmbeddedPostgresError is an Unavailable)."""
    out: dict[str, type[TunePlaneError]] = {}
    todo: list[type[TunePlaneError]] = [TunePlaneError]
    while todo:
        cls = todo.pop(0)  # breadth first: bases before their subclasses
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


def exit_code(err: TunePlaneError) -> int:
    for cls, code in _EXIT_CODES:
        if isinstance(err, cls):
            return code
    return FAILED


def is_transient(err: TunePlaneError) -> bool:
    """Worth retrying with the same request (and the same retry key)."""
    return isinstance(err, Unavailable | ServerError)


def from_problem(status: int, content_type: str, body: bytes) -> TunePlaneError:
    """Turn an HTTP error answer into the domain error it stands for.

    The class comes from the problem ``type`` (``…/errors/<code>``) when it names a known code,
    else from the status. A body that is not problem+json still gives a readable error.
    """
    problem: dict[str, Any] = {}
    if "json" in content_type:
        try:
            loaded = json.loads(body)
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            problem = loaded
    code = str(problem.get("type") or "").rstrip("/").rsplit("/", 1)[-1]
    cls = _by_code().get(code) if code else None
    if cls is None or cls is TunePlaneError:
        cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else InvalidInput
    detail = problem.get("detail") or problem.get("title")
    if not detail:
        text = body.decode("utf-8", "replace").strip()
        detail = f"HTTP {status}" + (f": {text[:300]}" if text else "")
    fix = str(problem.get("fix") or "")
    field = problem.get("field")
    if not fix and problem.get("extra"):  # litestar's own validation errors carry "extra"
        fix = "check the request: " + json.dumps(problem["extra"])[:300]
    rid = problem.get("request_id")
    if status >= 500 and isinstance(rid, str) and rid:  # the server's fault: its logs say more
        fix = (f"{fix}; " if fix else "") + f"the server's log lines of this request carry {rid}"
    return cls(str(detail), fix=fix, field=str(field) if field else None)


def from_os_error(exc: OSError) -> TunePlaneError:
    """A local file operation that failed (a path given on the command line, the config
    directory, a workspace file), as an error naming the file: never a traceback."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:  # a socket, a pipe: nothing names the file
        return TunePlaneError(
            f"an operating system call failed: {what}",
            fix="see the message; check the paths and addresses the command was given",
        )
    also = f" (and {exc.filename2})" if exc.filename2 is not None else ""
    return TunePlaneError(
        f"cannot use {exc.filename}{also}: {what}",
        fix="check the path, that its directories exist, and this user's permissions on it",
    )


def render(err: TunePlaneError) -> str:
    """The stderr text for an expected error: ``error:``, then ``field:`` and ``fix:`` lines."""
    lines = [f"error: {err.message}"]
    if err.field:
        lines.append(f"field: {err.field}")
    if err.fix:
        lines.append(f"fix: {err.fix}")
    return "\n".join(lines)
