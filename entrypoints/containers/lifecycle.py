"""The one way every process starts and stops its container."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar, cast

from dependency_injector import containers, providers

T = TypeVar("T")
C = TypeVar("C", bound=containers.Container)


@asynccontextmanager
async def started(container: C) -> AsyncIterator[C]:
    """Start every resource of ``container``; stop them all on the way out, however it ends.
    The one start/stop sequence of every process (and of `tp up`'s set-up steps)."""
    pending = container.init_resources()
    if pending is not None:
        await pending
    try:
        yield container
    finally:
        pending = container.shutdown_resources()
        if pending is not None:
            await pending


async def resolve(provider: providers.Provider[T]) -> T:
    """The object ``provider`` gives, awaited when it is built from async resources."""
    value: object = provider()
    if inspect.isawaitable(value):
        value = await value
    return cast(T, value)
