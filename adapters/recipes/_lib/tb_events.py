"""TensorBoard event files written with the standard library alone: TFRecords of `Event`
protobufs (a file version record, then one record of scalar summaries per step), CRC-32C
checked, as TensorBoard reads them. Shipped beside the artifacts that `include` it."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def _masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # a length-delimited field
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class EventWriter:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self.file = (directory / name).open("ab")
        self._write(struct.pack("<d", time.time()), b"", _field(3, b"brain.Event:2"))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        summary = b"".join(
            _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
            for tag, value in values.items()
        )
        self._write(struct.pack("<d", time.time()), b"\x10" + _varint(step), _field(5, summary))

    def _write(self, wall: bytes, step: bytes, rest: bytes) -> None:
        event = b"\x09" + wall + step + rest
        header = struct.pack("<Q", len(event))
        record = header + struct.pack("<I", _masked_crc(header)) + event
        self.file.write(record + struct.pack("<I", _masked_crc(event)))
        self.file.flush()
