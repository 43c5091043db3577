"""The async engine (SQLAlchemy 2 on asyncpg). What reaching the server needs without SQLAlchemy
(URL forms, session settings, the reachability check) is ``connect.py``."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from adapters.postgres.connect import KEEPALIVE_SECONDS, NO_JIT, async_url, keepalives


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
