"""How late a server's event loop runs, and how long its collector stops it: two histograms an
operator can read beside the round trips (docs/operations.md#metrics).

Every message a gateway answers waits for whatever holds its one event loop: a long piece of
Python between two awaits, a collection of the cycle collector, or a process the machine does
not schedule. ``watch_loop`` sleeps ``every`` seconds again and again and records how late each
wake-up came (``tuneplane_event_loop_lag_seconds``): ten observations a second, nothing per
message. ``watch_collections`` records each collection's pause by generation
(``tuneplane_gc_pause_seconds``), from ``gc.callbacks``: two clock reads per collection.
"""

from __future__ import annotations

import asyncio
import gc
import time

from application import instruments as i
from application.instruments import Instruments

EVERY = 0.1  # seconds between two samples of the loop's lag


async def watch_loop(instruments: Instruments, every: float = EVERY) -> None:
    """Record the loop's lag until cancelled."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(every)
        instruments.observe(i.LOOP_LAG_SECONDS, max(0.0, time.perf_counter() - start - every))


class CollectorPauses:
    """A ``gc.callbacks`` entry recording each collection's duration by generation."""

    GENERATIONS = ("0", "1", "2")

    def __init__(self, instruments: Instruments) -> None:
        self.instruments = instruments
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        pause = time.perf_counter() - self.started
        generation = self.GENERATIONS[info["generation"]]
        self.instruments.observe(i.GC_PAUSE_SECONDS, pause, generation=generation)


def watch_collections(instruments: Instruments) -> CollectorPauses:
    """Install the recorder (``unwatch_collections`` removes it)."""
    pauses = CollectorPauses(instruments)
    gc.callbacks.append(pauses)
    return pauses


def unwatch_collections(pauses: CollectorPauses) -> None:
    if pauses in gc.callbacks:
        gc.callbacks.remove(pauses)
