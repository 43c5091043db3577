"""The collector's parsers read files written by real writers to exactly the values written,
count and skip what is corrupt, wait for what is cut short, and never raise."""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboardX import SummaryWriter

from adapters.telemetry.columns import Parsed, Points, SourceParser
from adapters.telemetry.events import TfEventsParser
from adapters.telemetry.jsonl import JsonlParser
from adapters.telemetry.parsers import parser_for
from adapters.telemetry.tfrecord import frame

pytestmark = pytest.mark.unit


def f32(x: float) -> float:
    return float(np.float32(x))


def points(parsed: Parsed) -> list[tuple[str, int, float]]:
    return [(s.tag, s.step, s.value) for r in parsed.records for s in r.scalars]


def feed_in_chunks(parser: SourceParser, data: bytes, sizes: list[int]) -> Parsed:
    """Feed as the tailer does: what a chunk did not consume is read again with the next."""
    out, pos, i, parts = Parsed(), 0, 0, []
    while pos < len(data):
        size = sizes[i % len(sizes)]
        i += 1
        end = min(len(data), pos + size)
        got = parser.feed(data[pos:end], pos, final=end == len(data))
        parts.append(got.points)
        out.corrupt += got.corrupt
        if got.consumed == 0 and end < len(data):
            sizes = [s * 2 for s in sizes]  # a record longer than the chunk: read more
            continue
        pos += got.consumed
        if end == len(data) and got.consumed == 0:
            break
    out.consumed = pos
    out.points = Points.concat(parts)
    return out


def one_file(directory: Path) -> bytes:
    (path,) = directory.glob("*tfevents*")
    return path.read_bytes()


# -- TensorBoard event files ---------------------------------------------------------------


def test_tensorboardx_scalars_parse_to_the_values_written(tmp_path: Path) -> None:
    rng = random.Random(3)
    written = []
    with SummaryWriter(str(tmp_path)) as w:
        for step in range(200):
            for tag in ("train/loss", "train/reward"):
                value = rng.uniform(-1e3, 1e3)
                w.add_scalar(tag, value, step)
                written.append((tag, step, f32(value)))
        w.add_histogram("weights", np.arange(10), 0)
        w.add_text("notes", "hello", 0)
    parsed = TfEventsParser().feed(one_file(tmp_path), 0, final=True)
    assert points(parsed) == written
    assert parsed.corrupt == 0


def tensor_value(
    tag: str, value: float, dtype: int, first: bool, plugin: str = "scalars"
) -> summary_pb2.Summary.Value:
    """A TF2 ``tf.summary.scalar`` value: a rank-0 tensor; the metadata only the first time."""
    shape = tensor_shape_pb2.TensorShapeProto()
    if dtype == 1:
        tensor = tensor_pb2.TensorProto(dtype=1, tensor_shape=shape, float_val=[value])
    else:  # DT_DOUBLE in tensor_content, as TensorFlow serialises it
        tensor = tensor_pb2.TensorProto(
            dtype=2, tensor_shape=shape, tensor_content=struct.pack("<d", value)
        )
    v = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if first:
        v.metadata.plugin_data.plugin_name = plugin
    return v


def test_tensorflow_style_tensor_scalars_parse_to_the_values_written(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))  # TensorBoard's own writer
    written = []
    for step in range(50):
        values = [
            tensor_value("train/loss", 1 / (step + 1), 1, step == 0),
            tensor_value("eval/acc", step / 49, 2, step == 0),
            tensor_value("hist", 1.0, 1, step == 0, plugin="histograms"),  # another plugin
        ]
        writer.add_event(
            event_pb2.Event(
                step=step, wall_time=1.7e9 + step, summary=summary_pb2.Summary(value=values)
            )
        )
        written += [("train/loss", step, f32(1 / (step + 1))), ("eval/acc", step, step / 49)]
    writer.close()
    parsed = TfEventsParser().feed(one_file(tmp_path), 0, final=True)
    assert points(parsed) == written
    walls = {s.wall_time for r in parsed.records for s in r.scalars}
    assert walls == {1.7e9 + step for step in range(50)}


def events(n: int) -> tuple[bytes, list[tuple[str, int, float]]]:
    data = frame(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
    written = []
    for step in range(n):
        value = summary_pb2.Summary.Value(tag="x", simple_value=step + 0.5)
        e = event_pb2.Event(step=step, wall_time=2.0, summary=summary_pb2.Summary(value=[value]))
        data += frame(e.SerializeToString())
        written.append(("x", step, step + 0.5))
    return data, written


def test_a_bad_data_crc_skips_that_record_only() -> None:
    data, written = events(10)
    starts = [0]
    while starts[-1] < len(data):
        (length,) = struct.unpack_from("<Q", data, starts[-1])
        starts.append(starts[-1] + 16 + length)
    bad = bytearray(data)
    bad[starts[4] + 14] ^= 0xFF  # inside record 4's data (step 3)
    parsed = TfEventsParser().feed(bytes(bad), 0, final=True)
    assert parsed.corrupt == 1
    assert points(parsed) == written[:3] + written[4:]


def test_a_bad_length_resynchronises_at_the_next_record() -> None:
    data, written = events(10)
    bad = bytearray(data)
    first = 16 + struct.unpack_from("<Q", data, 0)[0]
    bad[first] ^= 0x01  # the length of record 1 (step 0): its header CRC fails
    parsed = TfEventsParser().feed(bytes(bad), 0, final=True)
    assert parsed.corrupt == 1
    assert points(parsed) == written[1:]
    assert parsed.consumed == len(data)


def test_a_cut_short_record_is_waited_for_then_read() -> None:
    data, written = events(5)
    parser = TfEventsParser()
    head = parser.feed(data[:-7], 0)
    assert points(head) == written[:4] and head.corrupt == 0
    rest = parser.feed(data[head.consumed :], head.consumed)
    assert points(rest) == written[4:] and rest.consumed == len(data) - head.consumed
    final = TfEventsParser().feed(data[:-7], 0, final=True)
    assert final.corrupt == 1 and final.consumed == len(data) - 7


@given(st.lists(st.integers(1, 300), min_size=1, max_size=8))
@settings(max_examples=50, deadline=None)
def test_any_chunking_reads_the_same_records(sizes: list[int]) -> None:
    data, written = events(40)
    assert points(feed_in_chunks(TfEventsParser(), data, sizes)) == written


@given(st.binary(max_size=2000), st.booleans())
@settings(max_examples=300, deadline=None)
def test_random_bytes_never_raise(data: bytes, final: bool) -> None:
    for parser in (TfEventsParser(), JsonlParser()):
        parsed = parser.feed(data, 0, final=final)
        assert 0 <= parsed.consumed <= len(data)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=20))
@settings(max_examples=300, deadline=None)
def test_mutated_event_files_never_raise(flips: list[tuple[int, int]]) -> None:
    data, _ = events(30)
    bad = bytearray(data)
    for at, byte in flips:
        bad[at % len(bad)] = byte
    parsed = TfEventsParser().feed(bytes(bad), 0, final=True)
    assert parsed.consumed == len(bad)


# -- JSONL ------------------------------------------------------------------------------------


def test_jsonl_forms_and_what_is_not_a_metric() -> None:
    lines = [
        {"step": 1, "wall_time": 5.0, "metrics": {"a": 1.5, "b": 2, "flag": True, "s": "x"}},
        {"step": 2, "time": 6.0, "loss": 0.25, "note": "text", "nested": {"x": 1}},
        {"step": 3, "timestamp": 7.0, "loss": float("nan")},
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    parsed = JsonlParser().feed(data, 100)
    got = [
        (r.offset, s.tag, s.step, s.wall_time, s.value) for r in parsed.records for s in r.scalars
    ]
    second = 100 + len(json.dumps(lines[0])) + 1
    assert got[:3] == [
        (100, "a", 1, 5.0, 1.5),
        (100, "b", 1, 5.0, 2.0),
        (second, "loss", 2, 6.0, 0.25),
    ]
    assert got[3][1:4] == ("loss", 3, 7.0) and math.isnan(got[3][4])
    assert parsed.corrupt == 0 and parsed.consumed == len(data)


def test_jsonl_bad_lines_are_counted_and_a_partial_line_waits() -> None:
    data = (
        b'{"step": 1, "x": 1}\nnot json\n[1, 2]\n{"x": 1}\n{"step": -1, "x": 1}\n\n{"step": 2, "x'
    )
    parser = JsonlParser()
    parsed = parser.feed(data, 0)
    assert points(parsed) == [("x", 1, 1.0)]
    assert parsed.corrupt == 4  # not JSON, not an object, no step, a negative step
    assert parsed.consumed == data.rindex(b"\n") + 1
    rest = b'{"step": 2, "x": 3}\n'
    assert points(parser.feed(rest, parsed.consumed)) == [("x", 2, 3.0)]
    final = JsonlParser().feed(b'{"step": 5, "x": 1}', 0, final=True)
    assert points(final) == [("x", 5, 1.0)]


def test_a_line_nested_too_deep_is_corrupt_not_a_parser_failure() -> None:
    deep = b'{"step": 1, "x": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}\n"
    listed = b'{"step": 2, "metrics": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    data = b'{"step": 0, "x": 1}\n' + deep + listed + b'{"step": 3, "x": 2}\n'
    parsed = JsonlParser().feed(data, 0)  # raised RecursionError
    assert points(parsed) == [("x", 0, 1.0), ("x", 3, 2.0)]
    assert (parsed.corrupt, parsed.consumed) == (2, len(data))


def test_files_are_claimed_by_name() -> None:
    events = parser_for(Path("runs/events.out.tfevents.1700000000.host.1"))
    assert events is not None and events.kind == "tfevents"
    jsonl = parser_for(Path("metrics/report-rank0.jsonl"))
    assert jsonl is not None and jsonl.kind == "jsonl"
    assert parser_for(Path("checkpoint.pt")) is None


metric_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)
sdk_lines = st.fixed_dictionaries(
    {
        "step": st.one_of(st.integers(-3, 2**64), st.booleans(), st.floats(0, 10)),
        "wall_time": st.one_of(st.floats(allow_nan=True), st.integers(0, 10**12), st.none()),
        "metrics": st.dictionaries(st.sampled_from(["loss", "lr", "", "é"]), metric_values),
    }
)


@given(st.lists(sdk_lines, max_size=30))
@settings(max_examples=200, deadline=None)
def test_the_sdk_form_fast_path_reads_what_the_general_path_reads(
    lines: list[dict[str, Any]],
) -> None:
    from adapters.telemetry import jsonl

    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    fast = JsonlParser().feed(data, 0)
    reference, corrupt, pos, at = jsonl._Columns(), 0, 0, {}
    for text, line in zip(data.split(b"\n")[:-1], lines, strict=True):
        corrupt += not reference.add(jsonl._object(text), pos)
        at[pos] = line
        pos += len(text) + 1
    want = reference.points()
    assert fast.corrupt == corrupt and fast.consumed == len(data)
    for column in ("offset", "step", "value"):
        assert np.array_equal(getattr(fast.points, column), getattr(want, column), equal_nan=True)
    assert [fast.points.tags[i] for i in fast.points.tag] == [want.tags[i] for i in want.tag]
    for offset, wall in zip(fast.points.offset.tolist(), fast.points.wall.tolist(), strict=True):
        given_wall = at[offset]["wall_time"]  # without a finite one: the time it was read
        if isinstance(given_wall, int | float) and math.isfinite(given_wall):
            assert wall == float(given_wall)
