"""A content-addressed blob store in memory (the simulator's jobs upload no sources).

It keeps the BlobStore contract the filesystem and S3 stores keep (tests/contract/
test_blob_stores.py runs it too): the same errors, a digest check on every read, and nothing
kept of an upload that fails.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from adapters.blobs import (
    check_digest,
    corrupt_blob,
    digest_mismatch,
    file_chunks,
    too_large,
    write_file,
)
from domain.blob_ports import StoredBlob
from domain.errors import NotFound


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
                raise too_large(max_size)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if expected is not None and expected != digest:
            raise digest_mismatch(digest, expected)
        self.blobs[digest] = bytes(data)
        self.stored_at[digest] = datetime.now(UTC)
        return digest, len(data)

    async def size(self, digest: str) -> int | None:
        check_digest(digest)
        data = self.blobs.get(digest)
        return None if data is None else len(data)

    async def put_file(
        self, path: str, max_size: int, beneath: str | None = None
    ) -> tuple[str, int]:
        return await self.put(file_chunks(path, beneath), max_size)

    async def copy_to(self, digest: str, path: str) -> None:
        await write_file(path, await self.read(digest))  # its digest checked

    async def read(self, digest: str) -> bytes:
        check_digest(digest)
        try:
            data = self.blobs[digest]
        except KeyError:
            raise NotFound(f"no blob {digest}", fix="upload it again") from None
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise corrupt_blob(digest, found, "memory")
        return data

    async def chunks(self, digest: str) -> AsyncIterator[bytes]:
        check_digest(digest)
        data = self.blobs.get(digest)
        if data is None:
            raise NotFound(f"no blob {digest}", fix="upload it again")
        for offset in range(0, len(data), 1024 * 1024):
            yield data[offset : offset + 1024 * 1024]

    async def listing(self) -> AsyncIterator[StoredBlob]:
        for digest, data in list(self.blobs.items()):
            yield StoredBlob(digest, len(data), self.stored_at[digest])

    async def delete(self, digest: str) -> None:
        check_digest(digest)
        self.blobs.pop(digest, None)
        self.stored_at.pop(digest, None)
