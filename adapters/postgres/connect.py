"""Reaching PostgreSQL, without SQLAlchemy: the URL forms, every session's settings, and the
check a process makes before it starts.

The SQLAlchemy engine (``engine.py``) and the plain asyncpg connections (the telemetry pool,
the signals listener, the leader lease) share these. The telemetry gateway needs asyncpg
only, and importing SQLAlchemy was a third of its start-up: nothing here may import it
(tests/unit/test_lean_imports.py).
"""

from __future__ import annotations

from urllib.parse import quote, unquote

import asyncpg

from domain.errors import InvalidInput, Unavailable

_SCHEMES = ("postgres", "postgresql")  # with or without a driver: postgresql+psycopg://
_FORM = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"


def _rest(url: str) -> str:
    """What follows the scheme of a PostgreSQL URL, its user name and password percent-encoded
    (``_userinfo``); ValueError (naming the scheme, never the rest, which may hold a password)
    for anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a URL: expected {_FORM}")
    if scheme.lower().split("+", 1)[0] not in _SCHEMES:
        raise ValueError(f"{scheme!r} is not a PostgreSQL URL: expected {_FORM}")
    user, password, where = _userinfo(rest)
    if user is None:
        return rest
    credentials = quote(user, safe="") + (
        "" if password is None else ":" + quote(password, safe="")
    )
    return f"{credentials}@{where}"


def _userinfo(rest: str) -> tuple[str | None, str | None, str]:
    """``USER:PASSWORD@`` split from the rest of a URL, both decoded. The credentials run to
    the last ``@``, so a password may hold ``@``, ``#``, ``/`` or ``?`` unencoded (a URL parser,
    asyncpg's among them, would take the last three for the fragment, path or query) and a user
    name an ``@`` (``user@server``). (None, None, rest) where there are none: a user name never
    holds ``/``, ``?`` or ``#``, so an ``@`` in the path or query alone is not taken for them."""
    before, at, where = rest.rpartition("@")
    user, colon, password = before.partition(":")
    if not at or any(c in user for c in "/?#"):
        return None, None, rest
    return unquote(user), unquote(password) if colon else None, where


def async_url(url: str) -> str:
    """``postgres://``, ``postgresql://`` or ``postgresql+<driver>://`` → ``postgresql+asyncpg``
    (for SQLAlchemy); the rest of the URL as given, its credentials percent-encoded."""
    return "postgresql+asyncpg://" + _rest(url)


def plain_url(url: str) -> str:
    """The ``postgresql://`` form (for asyncpg.connect, psql, libpq)."""
    return "postgresql://" + _rest(url)


def shown(url: str) -> str:
    """The plain form with the password replaced by ``***``, for messages."""
    rest = _rest(url)
    user, password, where = _userinfo(rest)
    if user is None:
        return "postgresql://" + rest
    return (
        f"postgresql://{quote(user, safe='')}" + ("" if password is None else ":***") + f"@{where}"
    )


KEEPALIVE_SECONDS = 60.0


def keepalives(seconds: float = KEEPALIVE_SECONDS) -> dict[str, str]:
    """Session settings under which the server notices, within about ``seconds``, a client
    whose host vanished without a word (cut off, powered down: no FIN, no RST) and ends its
    session, freeing its locks (a leader lease, an open transaction's rows): the server
    socket's TCP keepalives, silent for half of it, then three probes a sixth of it apart.
    The operating system's default is two hours."""
    return {
        "tcp_keepalives_idle": str(max(1, round(seconds / 2))),
        "tcp_keepalives_interval": str(max(1, round(seconds / 6))),
        "tcp_keepalives_count": "3",
    }


# Every session of the control plane and of the telemetry store runs with JIT off. Their
# statements are short and many; where PostgreSQL was built with LLVM (Debian's and most
# distributions' packages) the planner compiles any statement whose estimated cost passes
# jit_above_cost, and estimates of set-returning functions (a reservation's GPUs expanded by
# generate_series) pass it with a handful of rows: the live reservations' read took 8 ms instead
# of 0.45 ms for 20 reservations, 143-310 ms instead of 23-58 ms for 2,000, all of the difference
# compiling (docs/persistence.md, "No JIT"). The benchmarks' PostgreSQL has no JIT, so this also
# keeps a packaged server to the measured behaviour.
NO_JIT = {"jit": "off"}

CONNECT_SECONDS = 10.0


async def check_reachable(url: str) -> None:
    """Connect once and close: Unavailable, naming the server (never the password), when the
    database cannot be reached or refuses the credentials; for a process about to start."""
    try:
        where = shown(url)
    except ValueError:
        raise InvalidInput(
            "the database URL is not a PostgreSQL URL",
            fix="set TUNEPLANE_DATABASE_URL=postgresql://USER:PASSWORD@HOST:PORT/DATABASE",
        ) from None
    try:
        conn = await asyncpg.connect(plain_url(url), timeout=CONNECT_SECONDS)
    except (ValueError, OverflowError):  # asyncpg's reading of the URL: a port, an option
        raise InvalidInput(
            f"the database URL {where} cannot be used (a port or an option is not valid)",
            fix="set TUNEPLANE_DATABASE_URL=postgresql://USER:PASSWORD@HOST:PORT/DATABASE",
        ) from None
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise Unavailable(
            f"cannot reach the database {where}: {exc or type(exc).__name__}",
            fix="check TUNEPLANE_DATABASE_URL, that PostgreSQL runs there and accepts this user",
        ) from None
    await conn.close()
