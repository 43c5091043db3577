"""Wake-up hints between processes over PostgreSQL's LISTEN/NOTIFY
(``domain.coordination_ports.Signals``).

One dedicated asyncpg connection per process, outside every pool and transaction, LISTENs on
``tuneplane_<topic>`` for each subscribed topic and sends notifications with ``pg_notify``.
A hint carries nothing but its topic; subscribers re-read the database. When the connection
fails, hints are dropped (every loop still polls) and it is opened again in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from adapters.postgres.connect import plain_url

log = logging.getLogger("tuneplane.signals")

# asyncpg also raises InternalClientError (not an InterfaceError) for a connection the server
# ended in the middle of an operation
_ERRORS = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


def channel(topic: str) -> str:
    return f"tuneplane_{topic}"


class PostgresSignals:
    def __init__(self, url: str, *, timeout: float = 5.0, retry_seconds: float = 1.0) -> None:
        self._url = plain_url(url)
        self._timeout = timeout
        self._retry = retry_seconds
        self._wakes: dict[str, list[Callable[[], None]]] = {}
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.received = 0

    async def start(self) -> None:
        """Connect now if the database answers, and keep reconnecting in the background."""
        await self._connect()
        self._task = asyncio.create_task(self._keep())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        async with self._lock:
            await self._drop()

    def subscribe(self, topic: str, wake: Callable[[], None]) -> None:
        first = topic not in self._wakes
        self._wakes.setdefault(topic, []).append(wake)
        if first and self._conn is not None:  # connected already: listen from now on
            asyncio.get_running_loop().create_task(self._listen(topic))

    async def notify(self, topic: str) -> None:
        async with self._lock:
            conn = self._conn
            if conn is None:
                return
            try:
                await conn.execute(
                    "SELECT pg_notify($1, '')", channel(topic), timeout=self._timeout
                )
                self.sent += 1
            except _ERRORS as exc:
                log.info("cannot send the %s hint (%s); loops still poll", topic, exc)
                await self._drop()

    # -- the connection -----------------------------------------------------------------------

    def _on_notification(self, _conn: Any, _pid: int, name: str, _payload: str) -> None:
        self.received += 1
        topic = name.removeprefix("tuneplane_")
        for wake in self._wakes.get(topic, []):
            try:
                wake()
            except Exception:  # a subscriber's bug must not stop the others
                log.exception("waking a subscriber of %s failed", topic)

    async def _listen(self, topic: str) -> None:
        async with self._lock:
            if self._conn is not None:
                try:
                    await self._conn.add_listener(channel(topic), self._on_notification)
                except _ERRORS as exc:
                    log.info("cannot listen for %s (%s)", topic, exc)
                    await self._drop()

    async def _connect(self) -> None:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            try:
                conn = await asyncpg.connect(
                    self._url,
                    timeout=self._timeout,
                    server_settings={"application_name": "tuneplane-signals"},
                )
                for topic in list(self._wakes):
                    await conn.add_listener(channel(topic), self._on_notification)
            except _ERRORS as exc:
                log.info("signals: cannot connect (%s); loops still poll", exc)
                return
            self._conn = conn
        for wakes in list(self._wakes.values()):  # hints may have been lost: look now
            for wake in wakes:
                wake()

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._retry)
            conn = self._conn
            if conn is None or conn.is_closed():
                self._conn = None
                await self._connect()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), self._timeout)
            except _ERRORS:
                conn.terminate()
