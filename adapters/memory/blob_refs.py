"""What refers to blobs, in memory (``domain.blob_ports.BlobReferences``)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from adapters.memory.db import Tx


class MemoryBlobReferences:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def referenced(self, digests: Collection[str], now: datetime) -> set[str]:
        wanted = set(digests)
        found: set[str] = set()
        for job in self._tx.select("jobs", lambda j: bool(j.spec.blobs & wanted)):
            found |= job.spec.blobs
        live = self._tx.select("previews", lambda p: p.expires_at > now)
        for preview in live:
            found |= preview.spec.blobs
        found |= {r.blob for r in self._tx.select("plugins", lambda r: r.blob in wanted)}
        for c in self._tx.select("checkpoints", lambda c: not c.kept_in):  # not kept in place
            found |= {f"sha256:{f.sha256}" for f in c.manifest.files}
        return found & wanted
