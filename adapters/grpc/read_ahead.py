"""Reading a stream's messages ahead of its handler, so that a handler busy with one message
finds every message that arrived meanwhile at once (the telemetry gateway's cumulative acks).

A task reads the stream (grpclib's ``recv_message``, so its flow control gives back what was
read) into a queue of at most ``limit`` messages; past that it stops reading until the handler
took some, and HTTP/2 flow control holds the sender back. ``take`` returns what is queued (at
least one message, waiting for it), ``[]`` once the peer ended its side and everything queued
was taken, and raises what ended the reading (a reset, a malformed message) once the queue is
empty: the messages read before the fault are still handed over first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, Iterable
from typing import Generic, TypeVar

M = TypeVar("M")


class ReadAhead(Generic[M]):
    def __init__(self, messages: AsyncIterable[M], limit: int) -> None:
        self.messages = messages
        self.limit = max(1, limit)
        self.queue: deque[M] = deque()
        self.ended = False
        self.error: Exception | None = None
        self._taker: asyncio.Future[None] | None = None  # the handler, waiting for a message
        self._room: asyncio.Future[None] | None = None  # the reader, waiting for room

    async def run(self) -> None:
        """Reads until the stream ends (run it as a task; cancel it when the handler is done)."""
        loop = asyncio.get_running_loop()
        try:
            async for message in self.messages:
                self.queue.append(message)
                self._wake_taker()
                if len(self.queue) >= self.limit:
                    self._room = loop.create_future()
                    try:
                        await self._room
                    finally:
                        self._room = None
        except Exception as exc:  # handed to the handler by ``take``, after what was queued
            self.error = exc
        finally:
            self.ended = True
            self._wake_taker()

    async def take(self, most: int) -> list[M]:
        """Up to ``most`` queued messages in order, at least one (waits); ``[]`` at the end."""
        while not self.queue:
            if self.ended:
                if self.error is not None:
                    raise self.error
                return []
            self._taker = asyncio.get_running_loop().create_future()
            try:
                await self._taker
            finally:
                self._taker = None
        queue = self.queue
        taken = [queue.popleft() for _ in range(min(most, len(queue)))]
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        return taken

    def put_back(self, messages: Iterable[M]) -> None:
        """Messages taken but not handled: first again, in their order."""
        self.queue.extendleft(reversed(list(messages)))

    def _wake_taker(self) -> None:
        if self._taker is not None and not self._taker.done():
            self._taker.set_result(None)
