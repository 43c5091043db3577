"""Driver errors → ``domain.errors``, translated once, here.

* cannot connect, connection lost, pool exhausted, server shutting down → Unavailable
* unique violation → Conflict; foreign-key violation → NotFound (the parent row is absent)
* serialization failure / deadlock → Conflict (a lost race: re-read and decide again)
* missing table → Unavailable (the schema was not migrated)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc

from domain.errors import Conflict, NotFound, TunePlaneError, Unavailable

DB_FIX = (
    "check that PostgreSQL is running and that TUNEPLANE_DATABASE_URL points at it "
    "(unset, `tp up` starts an embedded server)"
)
MIGRATE_FIX = "apply the schema migrations: `python -m adapters.postgres.migrate upgrade --url URL`"

_UNAVAILABLE_CLASSES = ("08", "53", "57", "58")  # connection, resources, operator, system
_RACE_STATES = {"40001", "40P01"}


def _sqlstate(error: BaseException) -> str | None:
    orig = getattr(error, "orig", None)
    for candidate in (orig, getattr(orig, "__cause__", None), error):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def translate(error: BaseException, what: str) -> TunePlaneError | None:
    """The domain error for a driver error raised while doing ``what``; None if not ours."""
    if isinstance(error, TunePlaneError):
        return None
    if isinstance(error, sa_exc.TimeoutError):
        return Unavailable(
            f"{what}: no database connection free in the pool",
            fix="retry later; if it persists raise the pool size or find slow transactions",
        )
    if isinstance(error, OSError | TimeoutError):
        return Unavailable(f"{what}: cannot reach PostgreSQL ({error})", fix=DB_FIX)
    if not isinstance(error, sa_exc.DBAPIError):
        return None
    code = _sqlstate(error) or ""
    detail = getattr(getattr(error, "orig", None), "detail", None) or ""
    if code == "23505":
        return Conflict(f"{what}: already exists ({detail or error.orig})", fix="use a new id")
    if code == "23503":
        return NotFound(
            f"{what}: a referenced row does not exist ({detail})", fix="create it first"
        )
    if code in _RACE_STATES:
        return Conflict(f"{what}: lost a race with a concurrent transaction", fix="retry")
    if code == "42P01":
        return Unavailable(f"{what}: the database schema is missing", fix=MIGRATE_FIX)
    if code == "3D000":
        return Unavailable(f"{what}: the database does not exist ({error.orig})", fix=DB_FIX)
    if code == "28P01" or code == "28000":
        return Unavailable(f"{what}: PostgreSQL refused the login ({error.orig})", fix=DB_FIX)
    if (
        error.connection_invalidated
        or code[:2] in _UNAVAILABLE_CLASSES
        or isinstance(error, sa_exc.InterfaceError)
    ):
        return Unavailable(f"{what}: database connection failed ({error.orig})", fix=DB_FIX)
    return None


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Re-raise driver errors inside the block as domain errors (others pass unchanged)."""
    try:
        yield
    except Exception as error:
        mapped = translate(error, what)
        if mapped is None:
            raise
        raise mapped from error
