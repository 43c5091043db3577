"""Content-addressed blob storage (source archives, Job Capsules, plugin packages) and what
refers to its blobs, for garbage collection (``application/blob_gc.py``, docs/operations.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredBlob:
    digest: str
    size: int
    stored_at: datetime  # when it was last written (an idempotent put of it again renews it)


class BlobStore(Protocol):
    """Content-addressed storage (``sha256:<hex>`` keys)."""

    async def put(
        self, chunks: AsyncIterator[bytes], max_size: int, expected: str | None = None
    ) -> tuple[str, int]:
        """Store the stream; return (digest, size). Idempotent for identical content, and
        storing a blob again renews its ``stored_at`` (so a collection pass never deletes a
        blob that was just uploaded again).

        Raises TooLarge past ``max_size`` bytes, and InvalidInput when ``expected`` is given and
        the content's digest differs; in both cases nothing is stored.
        """
        ...

    async def put_file(
        self, path: str, max_size: int, beneath: str | None = None
    ) -> tuple[str, int]:
        """Store the content of the regular file ``path`` (a checkpoint's file) as ``put``
        does: the digest is that of the bytes stored, whatever happens to the file meanwhile.
        InvalidInput for a symbolic link or anything but a regular file, and, given
        ``beneath`` (the checkpoint's directory, whose parent the caller trusts), for a file
        not under it once opened: a workload that swapped one of its directories for a link
        after it was listed reads nothing of this host through it."""
        ...

    async def size(self, digest: str) -> int | None:
        """The stored size, or None if absent."""
        ...

    async def read(self, digest: str) -> bytes:
        """The content; raises NotFound if absent."""
        ...

    async def copy_to(self, digest: str, path: str) -> None:
        """Write the blob's content, its digest checked, to the new file ``path`` (a checkpoint
        handed to a later attempt). NotFound if absent or refused by the digest check. A store
        on the same filesystem may hard-link the file instead of copying it: callers hand it
        out read-only (a blob file is never written in place). A store that hashed the blob
        itself may prove it unchanged since instead of hashing it again (the filesystem
        store's stamp, docs/checkpoints.md#what-the-hand-over-costs)."""
        ...

    def chunks(self, digest: str) -> AsyncIterator[bytes]:
        """The content in pieces, as stored, without reading it whole (a checkpoint file sent to
        a node): NOT checked against the digest, which the reader does over what it got.
        NotFound if absent."""
        ...

    def listing(self) -> AsyncIterator[StoredBlob]:
        """Every stored blob, in no particular order."""
        ...

    async def delete(self, digest: str) -> None:
        """Remove a blob; missing is fine."""
        ...


class BlobReferences(Protocol):
    """What still needs a blob: a job (any state: a retry or a rerun reads its capsule and
    source again), a preview not yet expired (its confirmation builds the job from it), or a
    published plugin."""

    async def referenced(self, digests: Collection[str], now: datetime) -> set[str]:
        """Those of ``digests`` that something refers to."""
        ...
