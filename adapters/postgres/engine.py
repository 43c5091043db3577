"""The async engine (SQLAlchemy 2 on asyncpg)."""

from __future__ import annotations

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from domain.errors import InvalidInput, Unavailable


def async_url(url: str) -> str:
    """``postgres://``, ``postgresql://`` or ``postgresql+<driver>://`` → ``postgresql+asyncpg``."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"{parsed.drivername!r} is not a PostgreSQL URL")
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def plain_url(url: str) -> str:
    """The ``postgresql://`` form (for asyncpg.connect, psql, libpq)."""
    parsed = make_url(async_url(url))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


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


def create_engine(
    url: str,
    pool_size: int = 10,
    *,
    max_overflow: int = 10,
    pool_timeout: float = 30.0,
    connect_timeout: float = 10.0,
    application_name: str = "tuneplane",
    keepalive_seconds: float = KEEPALIVE_SECONDS,
    echo: bool = False,
) -> AsyncEngine:
    """An engine for ``url``; any PostgreSQL URL form is accepted (the driver is asyncpg).

    Connections are not pinged before use (that would cost a round trip per transaction on the
    commit path): after a server restart the first use of a dead connection fails as
    Unavailable ("retry later") and the pool replaces it. Dispose with ``await engine.dispose()``.
    """
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout,
        pool_recycle=3600,
        echo=echo,
        connect_args={
            "timeout": connect_timeout,
            "server_settings": {
                "application_name": application_name,
                **keepalives(keepalive_seconds),
                **NO_JIT,
            },
        },
    )


CONNECT_SECONDS = 10.0


async def check_reachable(url: str) -> None:
    """Connect once and close: Unavailable, naming the server (never the password), when the
    database cannot be reached or refuses the credentials; for a process about to start."""
    try:
        where = make_url(async_url(url)).render_as_string(hide_password=True)
    except (ValueError, ArgumentError):  # ArgumentError is a ValueError in some versions
        raise InvalidInput(
            "the database URL is not a PostgreSQL URL",
            fix="set TUNEPLANE_DATABASE_URL=postgresql://USER:PASSWORD@HOST:PORT/DATABASE",
        ) from None
    try:
        conn = await asyncpg.connect(plain_url(url), timeout=CONNECT_SECONDS)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise Unavailable(
            f"cannot reach the database {where}: {exc or type(exc).__name__}",
            fix="check TUNEPLANE_DATABASE_URL, that PostgreSQL runs there and accepts this user",
        ) from None
    await conn.close()
