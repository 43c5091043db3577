"""TFRecord framing, as TensorBoard event files use it.

Each record: ``uint64 length`` (little-endian), ``uint32`` masked CRC-32C of those 8 bytes, the
data, ``uint32`` masked CRC-32C of the data. ``spans`` walks a chunk of a file and returns the
position and data length of each sound record, counting what it must skip:

* a data CRC that does not match: that record is skipped (its length is trusted: its own CRC
  matched);
* a length CRC that does not match: the length cannot be trusted, so one corrupt record is
  counted and the reader resynchronises at the next position whose 12 bytes are a valid header;
* a record cut short at the end of the chunk: not consumed (the writer may be writing it),
  unless the file is final, where it counts as corrupt.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

# a larger length is taken as a corrupt header (docs/telemetry.md, "Sources"): a record is read
# whole into memory, so this bounds what one record of a job's file costs the collector
MAX_RECORD = 64 * 1024 * 1024
_LEN = struct.Struct("<QI")
_CRC = struct.Struct("<I")


def masked_crc(data: bytes | memoryview) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord around ``data`` (for tests and tools; the collector only reads)."""
    header = struct.pack("<Q", len(data))
    return header + _CRC.pack(masked_crc(header)) + data + _CRC.pack(masked_crc(data))


@dataclass(slots=True)
class Walk:
    consumed: int = 0
    corrupt: int = 0


def header_ok(data: bytes, pos: int) -> bool:
    length, crc = _LEN.unpack_from(data, pos)
    return bool(length <= MAX_RECORD and masked_crc(data[pos : pos + 8]) == crc)


def spans(data: bytes, walk: Walk, *, final: bool = False) -> tuple[list[int], list[int]]:
    """The position and data length of each sound record in ``data``; ``walk`` says how far it
    got (``consumed``) and what it skipped (``corrupt``)."""
    view = memoryview(data)
    unpack, crc = _LEN.unpack_from, crc32c.crc32c
    n = len(data)
    pos = 0
    positions: list[int] = []
    lengths: list[int] = []
    while True:
        if n - pos < 12:
            if final and pos < n:
                walk.corrupt += 1
                pos = n
            break
        length, header_crc = unpack(data, pos)
        c = crc(view[pos : pos + 8])
        if length > MAX_RECORD or (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF != header_crc:
            walk.corrupt += 1
            nxt = next((p for p in range(pos + 1, n - 11) if header_ok(data, p)), None)
            if nxt is None:  # the next header may start in bytes not written yet
                pos = n if final else max(pos + 1, n - 11)
                break
            pos = nxt
            continue
        end = pos + 16 + length
        if end > n:
            if final:
                walk.corrupt += 1
                pos = n
            break
        c = crc(view[pos + 12 : end - 4])
        if (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF != _CRC.unpack_from(data, end - 4)[
            0
        ]:
            walk.corrupt += 1
        else:
            positions.append(pos)
            lengths.append(length)
        pos = end
    walk.consumed = pos
    return positions, lengths
