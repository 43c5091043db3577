"""The event loop's lag and the collector's pauses as histograms (entrypoints/loop_watch.py):
a loop held by a blocking step shows as a late wake-up; each collection is recorded once, by
generation, and nothing after the recorder is removed."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.observability.prometheus import PrometheusInstruments
from entrypoints.loop_watch import unwatch_collections, watch_collections, watch_loop

pytestmark = pytest.mark.unit


def samples(measure: PrometheusInstruments) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(measure.exposition().decode())
        for s in f.samples
    }


async def test_a_blocked_loop_is_recorded_as_lag() -> None:
    measure = PrometheusInstruments()
    watcher = asyncio.create_task(watch_loop(measure, every=0.01))
    try:
        await asyncio.sleep(0.05)  # a few quiet samples
        time.sleep(0.3)  # noqa: ASYNC251 - a step that holds the loop, on purpose
        await asyncio.sleep(0.05)
    finally:
        watcher.cancel()
    found = samples(measure)
    count = found[("tuneplane_event_loop_lag_seconds_count", ())]
    assert count >= 3
    late = count - found[("tuneplane_event_loop_lag_seconds_bucket", (("le", "0.25"),))]
    assert late == 1  # the one sleep that spanned the blocking step, and only it


def test_each_collection_is_recorded_once_by_generation() -> None:
    measure = PrometheusInstruments()
    pauses = watch_collections(measure)
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        unwatch_collections(pauses)
    gc.collect(2)  # not recorded: removed
    found = samples(measure)
    assert found[("tuneplane_gc_pause_seconds_count", (("generation", "2"),))] == 1
    assert found[("tuneplane_gc_pause_seconds_count", (("generation", "0"),))] >= 1
    assert pauses not in gc.callbacks
