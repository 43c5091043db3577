"""Leadership of the scheduling loop: a PostgreSQL session advisory lock.

``PostgresLeaderLease(url, name="scheduler")`` holds ``pg_try_advisory_lock(key)`` — ``key`` a
fixed 64-bit number derived from ``name`` — on a dedicated connection of its own (asyncpg,
outside every engine pool and transaction). The lock lives exactly as long as that session:
a process that dies, or whose connection is cut (``pg_terminate_backend``, a network failure
noticed by the server's TCP keepalives within ``keepalive_seconds``), loses it, and another
process's ``acquire`` gets it. A leader cut off stops leading sooner: its next ``acquire``
finds its connection silent for ``timeout`` seconds.

``acquire()`` never blocks on the lock: it asks with ``pg_try_advisory_lock``, and every
database call is bounded by ``timeout`` seconds. While it holds the lock, each call checks
that the connection still answers; a dead one means "not leader" — the connection is dropped,
a new one is opened and the lock tried again at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import asyncpg

from adapters.postgres.connect import KEEPALIVE_SECONDS, keepalives, plain_url

log = logging.getLogger("tuneplane.lease")


def lease_key(name: str) -> int:
    """The advisory-lock key of lease ``name``: a signed 64-bit number (stable across
    processes and versions)."""
    digest = hashlib.sha256(f"tuneplane/lease/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresLeaderLease:
    """One process's claim on lease ``name`` in the database at ``url`` (any PostgreSQL URL
    form). ``acquire`` / ``release`` as ``domain.coordination_ports.LeaderLease``."""

    def __init__(
        self,
        url: str,
        name: str = "scheduler",
        timeout: float = 5.0,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
    ) -> None:
        self._url = plain_url(url)
        # the server ends the session of a leader whose host was cut off within about this
        self._settings = {"application_name": "tuneplane-leader", **keepalives(keepalive_seconds)}
        self.name = name
        self.key = lease_key(name)
        self._timeout = timeout
        self._conn: asyncpg.Connection | None = None
        self._held = False
        self._failures = 0  # tries in a row that could not reach the database
        self._mutex = asyncio.Lock()

    @property
    def held(self) -> bool:
        """Whether the last ``acquire`` found this process leading (no database call)."""
        return self._held

    async def acquire(self) -> bool:
        async with self._mutex:
            if self._held:
                if await self._alive():
                    return True
                log.warning("lease %s: the leader's connection is gone; leadership lost", self.name)
                await self._drop()
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(
                        self._url, timeout=self._timeout, server_settings=self._settings
                    )
                got = await self._conn.fetchval(
                    "SELECT pg_try_advisory_lock($1)", self.key, timeout=self._timeout
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                self._unreachable(exc)
                await self._drop()
                return False
            if self._failures:
                log.warning(
                    "lease %s: the database answers again (after %d failed tries)",
                    self.name,
                    self._failures,
                )
                self._failures = 0
            self._held = bool(got)
            return self._held

    def _unreachable(self, exc: BaseException) -> None:
        """Said once per outage at WARNING (a cut-off host tries every few seconds, for as long
        as the outage lasts), then at DEBUG until the database answers again."""
        self._failures += 1
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        log.log(
            level,
            "lease %s: cannot ask the database (%s); not leader until it answers%s",
            self.name,
            exc,
            "" if self._failures == 1 else f" ({self._failures} tries so far)",
        )

    async def release(self) -> None:
        async with self._mutex:
            conn, held = self._conn, self._held
            self._conn, self._held = None, False
            if conn is None:
                return
            try:
                if held and not conn.is_closed():
                    await conn.fetchval(
                        "SELECT pg_advisory_unlock($1)", self.key, timeout=self._timeout
                    )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pass  # closing the session below releases it anyway
            finally:
                await self._close(conn)

    async def _alive(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await conn.fetchval("SELECT 1", timeout=self._timeout)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return False
        return True

    async def _drop(self) -> None:
        conn, self._conn, self._held = self._conn, None, False
        if conn is not None:
            await self._close(conn)

    async def _close(self, conn: asyncpg.Connection) -> None:
        try:
            await asyncio.wait_for(conn.close(), self._timeout)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            conn.terminate()
