"""Source archives (or Job Capsules) arriving at a node daemon in ``SourceChunk`` pieces:
reassembled in order, checked against their digest, the last few kept for the Prepares that
need them (a piece out of order drops the partial archive: the gateway sends it again)."""

from __future__ import annotations

import hashlib
import logging

from domain.node_messages import SourceChunk

log = logging.getLogger("tuneplane.node")


class SourceArchives:
    def __init__(self, kept: int = 4) -> None:
        self.kept = kept
        self._whole: dict[str, bytes] = {}
        self._partial: dict[str, bytearray] = {}

    def add(self, chunk: SourceChunk) -> None:
        if chunk.digest in self._whole:
            return
        buf = self._partial.setdefault(chunk.digest, bytearray())
        if chunk.offset != len(buf):
            self._partial.pop(chunk.digest, None)  # out of order: start over at the next send
            return
        buf.extend(chunk.data)
        if chunk.last:
            data = bytes(self._partial.pop(chunk.digest))
            if "sha256:" + hashlib.sha256(data).hexdigest() == chunk.digest:
                self._whole[chunk.digest] = data
                while len(self._whole) > self.kept:
                    del self._whole[next(iter(self._whole))]
            else:
                log.warning("source archive %s arrived corrupted; dropped", chunk.digest)

    def get(self, digest: str) -> bytes | None:
        return self._whole.get(digest)

    def __contains__(self, digest: str) -> bool:
        return digest in self._whole
