"""TensorBoard event files → scalars.

Scalars come in two forms: the classic ``simple_value`` (tensorboardX, torch's SummaryWriter)
and a rank-0 tensor (TensorFlow 2's ``tf.summary.scalar``, tensorboardX ``new_style``), whose
tag names the ``scalars`` plugin in its metadata, which TF2 writes only with a tag's first
value: the parser remembers each tag's plugin. A rank-0 numeric tensor of a tag whose plugin is
unknown is taken as a scalar; tags of other plugins (histograms, images, text) are not.
Records that do not decode are counted corrupt. Nothing here raises on any input.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from adapters.telemetry.tfrecord import Walk, frames
from domain.telemetry import Parsed, Record, Scalar, SourceKind
from proto import tb_event_pb2 as pb

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}
_SCALARS = "scalars"


def _half(bits: int) -> float:
    return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])


def _bfloat16(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


def tensor_scalar(t: pb.TensorProto) -> float | None:
    """The value of a rank-0 (or all-ones shape) numeric tensor; None for anything else."""
    if any(d.size != 1 for d in t.tensor_shape.dim):
        return None
    dtype = t.dtype
    if t.tensor_content:
        if dtype == DT_BFLOAT16 and len(t.tensor_content) == 2:
            return _bfloat16(int.from_bytes(t.tensor_content, "little"))
        fmt = _CONTENT.get(dtype)
        if fmt is None or len(t.tensor_content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, t.tensor_content)[0])
    if dtype == DT_FLOAT and len(t.float_val) == 1:
        return float(t.float_val[0])
    if dtype == DT_DOUBLE and len(t.double_val) == 1:
        return float(t.double_val[0])
    if dtype == DT_INT32 and len(t.int_val) == 1:
        return float(t.int_val[0])
    if dtype == DT_INT64 and len(t.int64_val) == 1:
        return float(t.int64_val[0])
    if dtype in (DT_HALF, DT_BFLOAT16) and len(t.half_val) == 1:
        return (_half if dtype == DT_HALF else _bfloat16)(t.half_val[0])
    return None


class TfEventsParser:
    kind: SourceKind = "tfevents"

    def __init__(self) -> None:
        self.plugins: dict[str, str] = {}  # tag → plugin, from the first value that named it

    def feed(self, data: bytes, offset: int, *, final: bool = False) -> Parsed:
        walk = Walk()
        records: list[Record] = []
        corrupt = 0
        decode = pb.Event.FromString
        for pos, body in frames(data, walk, final=final):
            try:
                event = decode(body)
            except (DecodeError, ValueError):
                corrupt += 1
                continue
            if event.WhichOneof("what") != "summary":
                records.append(Record(offset + pos, ()))
                continue
            records.append(Record(offset + pos, self._scalars(event)))
        return Parsed(records, walk.consumed, walk.corrupt + corrupt)

    def _scalars(self, event: pb.Event) -> tuple[Scalar, ...]:
        out = []
        step, wall = event.step, event.wall_time
        for v in event.summary.value:
            tag = v.tag
            if v.HasField("metadata") and v.metadata.plugin_data.plugin_name:
                self.plugins[tag] = v.metadata.plugin_data.plugin_name
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                out.append(Scalar(tag, step, wall, float(v.simple_value)))
            elif kind == "tensor" and self.plugins.get(tag, _SCALARS) == _SCALARS:
                value = tensor_scalar(v.tensor)
                if value is not None:
                    out.append(Scalar(tag, step, wall, value))
        return tuple(s for s in out if s.tag and s.step >= 0)
