"""Short garbage-collector pauses for a process that holds many long-lived objects.

CPython's cycle collector stops the process for a full collection, and a full collection walks
every tracked object. The node gateway holds each stream's HTTP/2, TLS and asyncio state (a few
hundred objects a stream, millions at 10,000 streams), and a full collection came every 10 to
60 s, stalling its event loop 0.2 to 1.3 s each time: the heartbeats answered meanwhile made the
round trip's p99 (docs/benchmarks.md, "Towards 10,000 node streams").

``keep_pauses_short`` installs a policy on the collector (a callback, no thread):

- what survived a full collection is *frozen* (``gc.freeze``: moved out of the generations the
  collector walks), so the next full collections walk only what was made since;
- frozen objects are still freed by reference counting when their stream ends; only cyclic
  garbage among them waits: once what the process holds has grown by ``regrow`` (half) since
  the last complete collection, the frozen set is handed back (``gc.unfreeze``) and the next
  full collection walks everything once, then freezes again. As a fleet grows, that is one
  long pause per half again as much (about ten from a cold start to 10,000 streams); at a
  steady fleet, only the garbage of ended streams makes it grow. What the process holds is
  read from CPython's count of small-object blocks in use (``held``: a counter, a fraction of
  a millisecond), never from the frozen set's length: ``gc.get_freeze_count()`` walks that
  list, about 200 ms of CPU at 10,000 streams (a list of 1.4 million objects spread over a
  GiB, a cache miss each), and that walk was the heartbeat p99's one stop a window in
  session 42;
- the youngest generation is collected every ``young`` allocations instead of 700: per-message
  objects (a heartbeat's future, its timeout) then mostly die young instead of being promoted
  and feeding full collections.

``pace_collections`` (session 41) puts the young collections on a clock. CPython counts
allocations *minus deallocations* towards a young collection, and at a steady fleet each
heartbeat's new objects (the read's future and timeout, HTTP/2 state, living until the next
heartbeat 5 s later) replace the previous heartbeat's, which were old by then: the count stays
low while the youngest generation grows to every stream's newest objects, hundreds of thousands
at 10,000 streams, walked in one pause when the count finally passes ``young``. So every
``every`` seconds (a quarter second) the young generations are collected (generation 1 with
0: every ``middle_every``-th time, each time by default) and their survivors frozen: each pause
walks at most a quarter second of survivors, each survivor is walked once, and what lives
longer is walked only by the rare complete collection (frozen objects freed by reference
counting leave the frozen set at once; only cyclic garbage stays there until what the process
holds has grown by ``regrow``). A heartbeat leaves about 20 objects alive until the next one (the
awaits of the next read and write, 6 coroutines and their futures, the read's timeout and
its timer, the last message and its answer): at 2,000 heartbeats a second, 10,000 objects a
quarter second.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tuneplane.gc")

YOUNG = 20_000
REGROW = 0.5
# below this many small-object blocks (about 250,000 tracked objects: a freshly started gateway
# holds some 430,000 blocks, 110,000 tracked objects) a complete collection is cheap anyway
FLOOR = 1_000_000


def held() -> int:
    """What the process holds, as CPython's count of small-object blocks in use: read without
    walking anything (unlike ``gc.get_freeze_count``, see the module)."""
    return sys.getallocatedblocks()


class PausePolicy:
    """The collector callback; ``defer`` runs a change to the collector's lists outside the
    collection that called back (the event loop's ``call_soon_threadsafe``)."""

    def __init__(
        self,
        defer: Callable[[Callable[[], None]], Any],
        regrow: float = REGROW,
        floor: int = FLOOR,
    ) -> None:
        self.defer = defer
        self.regrow = regrow
        self.floor = floor
        self.base = 0  # ``held()`` right after the last complete collection
        self.complete = True  # the last full collection walked everything (nothing frozen)
        self.scheduled = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase != "stop" or info["generation"] != 2 or self.scheduled:
            return
        self.scheduled = True
        try:
            self.defer(self._after_full)
        except RuntimeError:  # the loop has closed: the process is ending
            self.scheduled = False

    def grown(self, now: int) -> bool:
        """Whether ``now`` (``held()``) is past ``regrow`` more than after the last complete
        collection."""
        return now > max(self.floor, self.base * (1 + self.regrow))

    def _after_full(self) -> None:
        self.scheduled = False
        now = held()
        if self.complete:
            gc.freeze()
            self.base = now
            self.complete = False
        elif self.grown(now):
            gc.unfreeze()  # the next full collection walks everything: ended streams' cycles
            self.complete = True
            log.info("collector: handed back for a complete collection (%d blocks held)", now)
        else:
            gc.freeze()


def keep_pauses_short(
    defer: Callable[[Callable[[], None]], Any], young: int = YOUNG, regrow: float = REGROW
) -> PausePolicy:
    """Install the policy (see the module); ``defer`` as for ``PausePolicy``."""
    gc.collect()
    gc.freeze()  # what the process made before serving: modules, the container
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
    policy = PausePolicy(defer, regrow)
    policy.base = held()
    policy.complete = False
    gc.callbacks.append(policy)
    return policy


EVERY = 0.25  # seconds between two paced young collections
# each one collects generation 1 too, then freezes what survived (session 42: every 4th one
# did, and each survivor was walked twice, once young and once in a generation-1 collection of
# a second's survivors, 29 ms at 10,000 streams; now once, in pauses of a quarter second's)
MIDDLE_EVERY = 1


class Pacer:
    """The young collections on a clock (see the module); ``tick`` runs one."""

    def __init__(self, policy: PausePolicy, middle_every: int = MIDDLE_EVERY) -> None:
        self.policy = policy
        self.middle_every = middle_every
        self.ticks = 0
        self.complete = 0  # complete collections run (the process had grown by ``regrow``)

    def tick(self) -> int:
        """One paced collection; returns the generation collected."""
        self.ticks += 1
        if self.ticks % self.middle_every:
            gc.collect(0)
            return 0
        gc.collect(1)
        policy = self.policy
        # the survivors (all that generation 2 holds, since everything older is frozen) leave
        # the generations the collector walks
        gc.freeze()
        now = held()
        if not policy.grown(now):
            return 1
        gc.unfreeze()  # the garbage cycles among the frozen: one complete collection, now
        gc.collect()
        gc.freeze()
        policy.base = held()
        policy.complete = False
        self.complete += 1
        log.info("collector: a complete collection at %d blocks held, %d after", now, policy.base)
        return 2


async def pace_collections(policy: PausePolicy, every: float = EVERY) -> None:
    """Run ``Pacer.tick`` every ``every`` seconds until cancelled."""
    pacer = Pacer(policy)
    while True:
        await asyncio.sleep(every)
        pacer.tick()


def stop_policy(policy: PausePolicy) -> None:
    """Remove the policy (tests; a process that ends needs nothing)."""
    if policy in gc.callbacks:
        gc.callbacks.remove(policy)
