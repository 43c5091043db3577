"""Events decoded by layout (many at once, with numpy) give exactly what decoding each event on
its own gives: over random files of mixed shapes (steps of every varint length, step 0 and wall
time 0 left out by protobuf, tags of several lengths, tensor values, other plugins, corrupt
records), chunked as the tailer reads them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2

from adapters.telemetry.columns import Parsed, Points
from adapters.telemetry.event_layouts import learn
from adapters.telemetry.events import TfEventsParser
from adapters.telemetry.tfrecord import frame

pytestmark = pytest.mark.unit

TAGS = ("loss", "train/reward", "x", "a/very/long/tag/name/of/some/length", "é/ü")


def simple(tag: str, value: float) -> summary_pb2.Summary.Value:
    return summary_pb2.Summary.Value(tag=tag, simple_value=value)


def tensor(tag: str, value: float) -> summary_pb2.Summary.Value:
    shape = tensor_shape_pb2.TensorShapeProto()
    t = tensor_pb2.TensorProto(dtype=1, tensor_shape=shape, float_val=[value])
    return summary_pb2.Summary.Value(tag=tag, tensor=t)


steps = st.one_of(
    st.integers(0, 200),
    st.sampled_from([0, 127, 128, 16383, 16384, 2**21, 2**35, 2**56 - 1, 2**56, 2**63 - 1]),
    st.integers(0, 2**63 - 1),
)
values = st.floats(width=32, allow_nan=True, allow_infinity=True)
value_kinds = st.sampled_from(["simple", "simple", "simple", "tensor"])
an_event = st.tuples(
    steps,
    st.sampled_from([0.0, 1.7e9, 1.7e9 + 0.5]),
    st.lists(st.tuples(st.sampled_from(TAGS), values, value_kinds), max_size=5),
)


def file_of(events: list[tuple[int, float, list[tuple[str, float, str]]]], junk: int) -> bytes:
    out = bytearray()
    for i, (step, wall, vals) in enumerate(events):
        summary = summary_pb2.Summary(
            value=[(simple if kind == "simple" else tensor)(t, v) for t, v, kind in vals]
        )
        body = event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString()
        record = bytearray(frame(body))
        if junk and i % junk == junk - 1:
            record[-1] ^= 0xFF  # a data CRC that does not match: the record is skipped
        out += record
    return bytes(out)


def parse(data: bytes, max_layouts: int, chunk: int) -> Parsed:
    parser, parts, pos, corrupt = TfEventsParser(max_layouts=max_layouts), [], 0, 0
    while pos < len(data):
        got = parser.feed(data[pos : pos + chunk], pos, final=pos + chunk >= len(data))
        parts.append(got.points)
        corrupt += got.corrupt
        if got.consumed == 0:
            chunk *= 2
            continue
        pos += got.consumed
    return Parsed(Points.concat(parts), pos, corrupt)


def rows(p: Points) -> list[tuple[object, ...]]:
    tags = [p.tags[i] for i in p.tag.tolist()]
    cols = (p.offset.tolist(), tags, p.step.tolist(), p.wall.tolist(), p.value.tolist())
    return [
        (o, t, s, w, "nan" if math.isnan(v) else v) for o, t, s, w, v in zip(*cols, strict=True)
    ]


@given(
    st.lists(an_event, max_size=60),
    st.integers(0, 7),
    st.sampled_from([64, 300, 4096, 1 << 20]),
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_layouts_decode_exactly_as_one_by_one(
    events: list[tuple[int, float, list[tuple[str, float, str]]]],
    junk: int,
    chunk: int,
    repeat: bool,
) -> None:
    if repeat:  # the common case: the same tags step after step
        events = [(s, w, [(t, v + s, k) for t, v, k in events[0][2]]) for s, w, _ in events]
    data = file_of(events, junk)
    fast, reference = parse(data, 16, chunk), parse(data, 0, chunk)
    assert rows(fast.points) == rows(reference.points)
    assert (fast.consumed, fast.corrupt) == (reference.consumed, reference.corrupt)


def test_a_run_of_alike_events_is_decoded_by_one_layout() -> None:
    events = [(s, 1.7e9 + s, [("loss", 1 / (s + 1), "simple"), ("lr", 0.1, "simple")])
              for s in range(1, 1000)]  # fmt: skip
    data = file_of(events, 0)
    body = data[12 : 12 + int.from_bytes(data[:8], "little")]
    layout = learn(body)
    assert layout is not None and layout.tags == ("loss", "lr") and layout.step_len == 1
    parsed = TfEventsParser().feed(data, 0, final=True)
    assert len(parsed.points) == 1998 and parsed.corrupt == 0
    assert parsed.points.step.tolist()[-2:] == [999, 999]
    want = np.array([1 / (s + 1) for s in range(1, 1000)], dtype=np.float32)
    assert np.allclose(parsed.points.value[::2], want)


@pytest.mark.parametrize(
    "event",
    [
        event_pb2.Event(wall_time=1.0, file_version="brain.Event:2"),
        event_pb2.Event(wall_time=1.0, step=3, summary=summary_pb2.Summary(value=[tensor("t", 1)])),
        event_pb2.Event(step=-1, summary=summary_pb2.Summary(value=[simple("t", 1.0)])),
        event_pb2.Event(step=1, summary=summary_pb2.Summary(value=[simple("", 1.0)])),
        event_pb2.Event(step=1, summary=summary_pb2.Summary()),
    ],
    ids=["file version", "tensor", "negative step", "empty tag", "empty summary"],
)
def test_other_shapes_have_no_layout(event: event_pb2.Event) -> None:
    assert learn(event.SerializeToString()) is None
