"""The collector's TensorBoard parser against TensorBoard's own loader (not part of the suite).

One event file of ``BENCH_SCALARS`` scalars (1,000,000: 250,000 events of 4 tags; TensorBoard's
own Event protobuf classes in TFRecord framing, as every writer lays them out, since writing a
million scalars through tensorboardX takes minutes), read twice in the same run: (a) TensorBoard's
``EventFileLoader`` (no TensorFlow installed: its pure-Python TFRecord reader with CRC checks
and the protobuf classes; it turns each ``simple_value`` into a tensor, as TensorBoard reads
them); (b) the collector's ``TfEventsParser``
fed 1 MiB chunks as the tailer does, CRC-32C checks on, to the columns it hands the spool (the
check that both found the same scalars runs after the clock stopped).

Run: ``.venv/bin/pytest tests/bench/bench_event_parse.py -m bench -s``
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2

from adapters.telemetry.columns import Points
from adapters.telemetry.events import TfEventsParser
from tests.support.telemetry_rig import tfrecord

pytestmark = pytest.mark.bench

SCALARS = int(os.environ.get("BENCH_SCALARS", "1000000"))
TAGS = ("train/loss", "train/reward", "train/lr", "grad_norm")
CHUNK = 1024 * 1024


def test_parse_rate(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1.bench"
    with open(path, "wb") as f:
        f.write(tfrecord(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
                         .SerializeToString()))  # fmt: skip
        for step in range(SCALARS // len(TAGS)):
            values = [
                summary_pb2.Summary.Value(tag=tag, simple_value=step * 0.001 + k)
                for k, tag in enumerate(TAGS)
            ]
            event = event_pb2.Event(
                wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(value=values)
            )
            f.write(tfrecord(event.SerializeToString()))
    data = path.read_bytes()

    t0 = time.perf_counter()
    loader = [
        (v.tag, e.step, v.tensor.float_val[0] if v.HasField("tensor") else v.simple_value)
        for e in EventFileLoader(str(path)).Load()
        for v in e.summary.value
    ]
    a = time.perf_counter() - t0

    t0 = time.perf_counter()
    parser, parts, pos = TfEventsParser(), [], 0
    while pos < len(data):
        parsed = parser.feed(data[pos : pos + CHUNK], pos, final=pos + CHUNK >= len(data))
        parts.append(parsed.points)  # columns, as the tailer spools them
        pos += parsed.consumed
    b = time.perf_counter() - t0
    got = [(s.tag, s.step, s.value) for r in Points.concat(parts).records() for s in r.scalars]
    assert got == loader and len(got) == SCALARS
    print(
        f"\n{SCALARS:,} scalars, {len(data) / 1e6:.1f} MB"
        f"\n(a) TensorBoard EventFileLoader: {a:.2f} s = {SCALARS / a:,.0f} scalars/s"
        f"\n(b) TfEventsParser (CRC-32C on, 1 MiB chunks): {b:.2f} s = {SCALARS / b:,.0f} scalars/s"
        f"\n(b)/(a) = {a / b:.1f}x"
    )
