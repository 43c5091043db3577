"""Calls that arrive together, done as one (``Batched``).

While one batch runs, the calls that arrive queue up and become the next batch, so a burst of
ten thousand calls costs a few batches, and a lone call runs at once (a batch of one). Each
caller waits for its batch and gets its error, if the batch failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Batched(Generic[T]):
    def __init__(self, run: Callable[[list[T]], Awaitable[object]]) -> None:
        self._run = run
        self._queued: list[tuple[T, asyncio.Future[None]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def __call__(self, item: T) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queued.append((item, done))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        await done

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[None]]] = []
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    await self._run([item for item, _ in batch])
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # whatever ended the batch, its callers get it
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
        except asyncio.CancelledError:  # no caller waits for a batch that will not run
            for _, done in [*batch, *self._queued]:
                done.cancel()
            self._queued = []
            raise
