"""TFRecord framing, as TensorBoard event files use it.

Each record: ``uint64 length`` (little-endian), ``uint32`` masked CRC-32C of those 8 bytes, the
data, ``uint32`` masked CRC-32C of the data. ``frames`` walks a chunk of a file and yields each
record's data with its position, counting what it must skip:

* a data CRC that does not match: that record is skipped (its length is trusted: its own CRC
  matched);
* a length CRC that does not match: the length cannot be trusted, so one corrupt record is
  counted and the reader resynchronises at the next position whose 12 bytes are a valid header;
* a record cut short at the end of the chunk: not consumed (the writer may be writing it),
  unless the file is final, where it counts as corrupt.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

MAX_RECORD = 256 * 1024 * 1024  # a larger length is taken as a corrupt header
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


def _header_ok(data: bytes, pos: int) -> bool:
    length, crc = _LEN.unpack_from(data, pos)
    return bool(length <= MAX_RECORD and masked_crc(data[pos : pos + 8]) == crc)


def frames(data: bytes, walk: Walk, *, final: bool = False) -> Iterator[tuple[int, memoryview]]:
    """Yield ``(position, record data)`` of each sound record in ``data``; ``walk`` says how far
    it got (``consumed``) and what it skipped (``corrupt``) once the iterator is exhausted."""
    view = memoryview(data)
    n = len(data)
    pos = 0
    while True:
        if n - pos < 12:
            if final and pos < n:
                walk.corrupt += 1
                pos = n
            break
        if not _header_ok(data, pos):
            walk.corrupt += 1
            nxt = next((p for p in range(pos + 1, n - 11) if _header_ok(data, p)), None)
            if nxt is None:  # the next header may start in bytes not written yet
                pos = n if final else max(pos + 1, n - 11)
                break
            pos = nxt
            continue
        length = _LEN.unpack_from(data, pos)[0]
        end = pos + 16 + length
        if end > n:
            if final:
                walk.corrupt += 1
                pos = n
            break
        body = view[pos + 12 : pos + 12 + length]
        if masked_crc(body) != _CRC.unpack_from(data, pos + 12 + length)[0]:
            walk.corrupt += 1
        else:
            yield pos, body
        pos = end
    walk.consumed = pos
