"""Waiting on a condition instead of sleeping a fixed time (docs/testing.md).

``await until(probe, what=...)`` asks ``probe`` (a function, sync or async) every ``every``
seconds and returns its first truthy answer; after ``within`` seconds it raises AssertionError
naming ``what`` and the last answer. ``wait_until`` is the same for synchronous tests. The limit
is a deadline for a broken run, never a measurement: a test asserts what happened, not how fast.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


@overload
async def until(
    probe: Callable[[], Awaitable[T]], *, what: str, within: float = ..., every: float = ...
) -> T: ...


@overload
async def until(
    probe: Callable[[], T], *, what: str, within: float = ..., every: float = ...
) -> T: ...


async def until(
    probe: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    within: float = 60.0,
    every: float = 0.1,
) -> T:
    deadline = time.monotonic() + within
    while True:
        answer = probe()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what} (last answer: {answer!r})")
        await asyncio.sleep(every)


def wait_until(probe: Callable[[], T], *, what: str, within: float = 60.0, every: float = 0.1) -> T:
    deadline = time.monotonic() + within
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what} (last answer: {answer!r})")
        time.sleep(every)
