"""Journal calls from the node daemon's use cases.

A node's journal is SQLite with ``synchronous=FULL``: every call may fsync, so it runs off the
event loop. An in-memory journal (it declares ``in_memory = True``: the simulator's and the
tests') is called in place: nothing blocks, and a simulated run keeps the same interleavings for
the same seed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from domain.node_daemon_ports import MemberJournal

T = TypeVar("T")


async def journal_call(journal: MemberJournal, fn: Callable[..., T], *args: object) -> T:
    if journal.in_memory:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)
