"""The one mapping from domain errors to gRPC statuses (both gateways)."""

from __future__ import annotations

from grpclib import GRPCError, Status

from domain.errors import Forbidden, InvalidInput, NotFound, TunePlaneError, Unauthenticated

_STATUS: tuple[tuple[type[TunePlaneError], Status], ...] = (
    (Unauthenticated, Status.UNAUTHENTICATED),
    (Forbidden, Status.PERMISSION_DENIED),
    (InvalidInput, Status.INVALID_ARGUMENT),
    (NotFound, Status.NOT_FOUND),
)


def grpc_status(exc: TunePlaneError) -> Status:
    return next((s for kind, s in _STATUS if isinstance(exc, kind)), Status.FAILED_PRECONDITION)


def grpc_error(exc: TunePlaneError) -> GRPCError:
    """The error with its message and fix, as the status's text."""
    text = str(exc) + (f" (fix: {exc.fix})" if exc.fix else "")
    return GRPCError(grpc_status(exc), text)


def bearer(metadata: object) -> str:
    """The token of an ``authorization: Bearer <token>`` metadata entry, or ""."""
    get = getattr(metadata, "get", None)
    value = get("authorization", "") if get is not None else ""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    prefix = "bearer "
    return value[len(prefix) :].strip() if value.lower().startswith(prefix) else ""
