"""What refers to blobs, on PostgreSQL (``domain.blob_ports.BlobReferences``).

One statement per batch of candidate digests: the digests the jobs' and live previews' specs
name (``spec.source.digest``, ``spec.capsule.blob``), the plugins' package blobs and the files
of checkpoints kept in the blob store (not of those kept in place, in Slurm's shared directory:
their files are no blobs), hash-joined with the candidates. It reads the jobs table once per
batch (no index on those JSON paths: a collection pass is rare and reads it in batches of 1,000
blobs)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_REFERENCED = text("""
WITH wanted AS (SELECT unnest(CAST(:digests AS text[])) AS d),
refs AS (
    SELECT spec->'source'->>'digest' AS d FROM jobs
    UNION ALL SELECT spec->'capsule'->>'blob' FROM jobs
    UNION ALL SELECT spec->'source'->>'digest' FROM previews WHERE expires_at > :now
    UNION ALL SELECT spec->'capsule'->>'blob' FROM previews WHERE expires_at > :now
    UNION ALL SELECT blob FROM plugins
    UNION ALL SELECT 'sha256:' || (f->>'sha256')
              FROM checkpoints, jsonb_array_elements(manifest->'files') f
              WHERE kept_in IS NULL
)
SELECT DISTINCT w.d FROM wanted w JOIN refs r ON r.d = w.d
""")


class PostgresBlobReferences:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def referenced(self, digests: Collection[str], now: datetime) -> set[str]:
        if not digests:
            return set()
        rows = await self._conn.execute(_REFERENCED, {"digests": list(digests), "now": now})
        return {row[0] for row in rows}
