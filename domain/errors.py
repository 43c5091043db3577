"""The one error taxonomy. Every edge (HTTP, CLI exit code, gRPC) maps these once, in one module.

Each error carries a human ``message`` that names the problem, and a ``fix`` that says what to do.
``field`` names the offending input field where there is one (dotted path, e.g. ``intent.profile``).
"""

from __future__ import annotations


class TunePlaneError(Exception):
    """Base of every error the platform raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, fix: str = "", field: str | None = None) -> None:
        message = without_fix(message, fix)
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.field = field

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})" if self.fix else self.message


def without_fix(message: str, fix: str) -> str:
    """``message`` without the copies of ``fix`` that ``str()`` of an error (`` (fix)``) or a
    gRPC status text (`` (fix: fix)``) appended to it: an error re-wrapped as
    ``Error(f"…: {exc}", fix=exc.fix)`` then still shows its fix once (the edges print
    ``message`` and ``fix`` separately)."""
    if not fix:
        return message
    for copy in (f" (fix: {fix})", f" ({fix})"):
        message = message.replace(copy, "")
    return message


class InvalidInput(TunePlaneError):
    """The request is malformed or names something that does not exist (HTTP 400/422)."""

    code = "invalid-input"


class Unauthenticated(TunePlaneError):
    """No credential, or one that is unknown or revoked (HTTP 401)."""

    code = "unauthenticated"


class Forbidden(TunePlaneError):
    """The credential is valid but may not do this (HTTP 403)."""

    code = "forbidden"


class NotFound(TunePlaneError):
    """The named object does not exist, or the caller may not see it (HTTP 404)."""

    code = "not-found"


class Conflict(TunePlaneError):
    """The request conflicts with the current state, e.g. a stale preview (HTTP 409)."""

    code = "conflict"


class Expired(TunePlaneError):
    """The object existed but its validity window has passed (HTTP 410)."""

    code = "expired"


class RetryKeyReused(TunePlaneError):
    """A retry key was sent again with a different request (HTTP 422)."""

    code = "retry-key-reused"


class TooLarge(TunePlaneError):
    """A payload exceeds a configured limit (HTTP 413)."""

    code = "too-large"


class IllegalTransition(TunePlaneError):
    """A state machine was asked to move along an edge it does not have (a bug, or a race lost)."""

    code = "illegal-transition"


class Unavailable(TunePlaneError):
    """A dependency (database, container engine) is unreachable: retry later (HTTP 503)."""

    code = "unavailable"
