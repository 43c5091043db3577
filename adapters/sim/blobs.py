"""A content-addressed blob store in memory (the simulator's jobs upload no sources)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from domain.blob_ports import StoredBlob
from domain.errors import InvalidInput, NotFound, TooLarge


class MemoryBlobStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.stored_at: dict[str, datetime] = {}

    async def put(
        self, chunks: AsyncIterator[bytes], max_size: int, expected: str | None = None
    ) -> tuple[str, int]:
        data = bytearray()
        async for chunk in chunks:
            data += chunk
            if len(data) > max_size:
                raise TooLarge(f"the upload exceeds the limit of {max_size} bytes", fix="send less")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if expected is not None and expected != digest:
            raise InvalidInput(
                f"the content's digest is {digest}, not the declared {expected}",
                fix="upload again",
                field="header.X-Content-Digest",
            )
        self.blobs[digest] = bytes(data)
        self.stored_at[digest] = datetime.now(UTC)
        return digest, len(data)

    async def size(self, digest: str) -> int | None:
        data = self.blobs.get(digest)
        return None if data is None else len(data)

    async def read(self, digest: str) -> bytes:
        try:
            return self.blobs[digest]
        except KeyError:
            raise NotFound(f"no blob {digest}", fix="upload it again") from None

    async def listing(self) -> AsyncIterator[StoredBlob]:
        for digest, data in list(self.blobs.items()):
            yield StoredBlob(digest, len(data), self.stored_at[digest])

    async def delete(self, digest: str) -> None:
        self.blobs.pop(digest, None)
        self.stored_at.pop(digest, None)
