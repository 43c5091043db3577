"""The one mapping between domain errors and gRPC statuses (both gateways, both clients).

A status's text is the message, then `` (fix: …)`` once. Clients split it back
(``split_fix``), so an error that crossed the wire prints its fix once, not once per hop.

A status's text travels in an HTTP/2 header (``grpc-message``, percent-encoded: up to 9 bytes
a character), and a header block past the peer's limit (64 KiB in h2) ends the stream with a
protocol error instead of the refusal. Messages echo what a client sent (a 100 KB node name),
so both parts are bounded here, where every refusal becomes a status (``MAX_MESSAGE``,
``MAX_FIX``), the cut marked."""

from __future__ import annotations

from grpclib import GRPCError, Status

from domain.errors import (
    Forbidden,
    InvalidInput,
    NotFound,
    TunePlaneError,
    Unauthenticated,
    Unavailable,
)
from domain.texts import cut

_FIX = " (fix: "
MAX_MESSAGE = 1024  # characters; what a cut message keeps still names the field
MAX_FIX = 1024

_STATUS: tuple[tuple[type[TunePlaneError], Status], ...] = (
    (Unauthenticated, Status.UNAUTHENTICATED),
    (Forbidden, Status.PERMISSION_DENIED),
    (InvalidInput, Status.INVALID_ARGUMENT),
    (NotFound, Status.NOT_FOUND),
)


def grpc_status(exc: TunePlaneError) -> Status:
    return next((s for kind, s in _STATUS if isinstance(exc, kind)), Status.FAILED_PRECONDITION)


def grpc_error(exc: TunePlaneError) -> GRPCError:
    """The error with its message and fix, as the status's text (each part bounded)."""
    message = cut(exc.message, MAX_MESSAGE)
    text = f"{message}{_FIX}{cut(exc.fix, MAX_FIX)})" if exc.fix else message
    return GRPCError(grpc_status(exc), text)


def split_fix(text: str) -> tuple[str, str]:
    """A status text → (message, fix); fix is "" when the text carries none."""
    head, sep, tail = text.rpartition(_FIX)
    if sep and tail.endswith(")") and head:
        return head, tail[:-1]
    return text, ""


def from_grpc(exc: GRPCError, what: str, fix: str = "") -> TunePlaneError:
    """The domain error a client raises for a refusal: ``what: <the gateway's message>``, with
    the gateway's fix (else ``fix``). Refusals the caller cannot retry away are Unauthenticated
    or InvalidInput; the rest are Unavailable (try again)."""
    message, sent_fix = split_fix(exc.message or exc.status.name)
    text, fix = f"{what}: {message}", sent_fix or fix
    if exc.status is Status.UNAUTHENTICATED:
        return Unauthenticated(text, fix=fix)
    if exc.status in (Status.INVALID_ARGUMENT, Status.NOT_FOUND, Status.FAILED_PRECONDITION):
        return InvalidInput(text, fix=fix)
    return Unavailable(text, fix=fix)


def bearer(metadata: object) -> str:
    """The token of an ``authorization: Bearer <token>`` metadata entry, or ""."""
    get = getattr(metadata, "get", None)
    value = get("authorization", "") if get is not None else ""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    prefix = "bearer "
    return value[len(prefix) :].strip() if value.lower().startswith(prefix) else ""
