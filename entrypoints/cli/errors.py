"""The CLI's one mapping of errors: problem+json → domain error → exit code and stderr text.

Every expected failure is a ``domain.errors.TunePlaneError``; ``main.run`` renders it with
``render`` and exits with ``exit_code``. Nothing else in the CLI decides an exit code.
"""

from __future__ import annotations

import json
import re
from typing import Any

from domain.documents import json_loads
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
from entrypoints.cli.escape import escape

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


def from_problem(status: int, content_type: str, body: bytes, server: str = "") -> TunePlaneError:
    """Turn an HTTP error answer into the domain error it stands for.

    The class comes from the problem ``type`` (``…/errors/<code>``) when it names a known code,
    else from the status. A body that is not a JSON object (an HTML page of another server, a
    proxy's) says that ``server`` answered with a page that is not TunePlane's, and what to
    check. What the server wrote is escaped (``escape``): it never controls the terminal.
    """
    problem: dict[str, Any] = {}
    if "json" in content_type:
        try:
            loaded = json_loads(body, walk=False)
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
    if not problem:
        message, fix = _not_tuneplane(status, body, server)
        return cls(message, fix=fix)
    detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
    fix = str(problem.get("fix") or "")
    field = problem.get("field")
    if not fix and problem.get("extra"):  # litestar's own validation errors carry "extra"
        fix = "check the request: " + json.dumps(problem["extra"])[:300]
    rid = problem.get("request_id")
    if status >= 500 and isinstance(rid, str) and rid:  # the server's fault: its logs say more
        fix = (f"{fix}; " if fix else "") + f"the server's log lines of this request carry {rid}"
    shown_field = escape(field) if field else None
    return cls(escape(detail), fix=escape(fix), field=shown_field)


_TAG = re.compile(r"<[^>]*>")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


def _not_tuneplane(status: int, body: bytes, server: str) -> tuple[str, str]:
    """The message and fix of an error answer that is no TunePlane problem: its page's title
    (or its first 200 characters of text) says whose page it is."""
    text = body.decode("utf-8", "replace")
    found = _TITLE.search(text)
    said = " ".join(_TAG.sub(" ", found.group(1) if found else text).split())[:200]
    who = f"the server at {server}" if server else "the server"
    message = f"{who} answered HTTP {status} with a page that is not a TunePlane answer" + (
        f" ({escape(said)})" if said else ""
    )
    fix = (
        "check that `tp login --server` (or TUNEPLANE_SERVER) names the TunePlane API: the URL"
        " `tp up` printed, with the path the API sits under behind a reverse proxy"
    )
    if status in (502, 503, 504):
        fix += "; a proxy's gateway error may also mean the control plane is down (`tp up`)"
    return message, fix


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
