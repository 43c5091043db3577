"""Blob garbage collection: delete the blobs nothing refers to any more (docs/operations.md).

A blob is kept while a job refers to it (any state: a retry reads its capsule and source
again), while a preview that has not expired does, or a published plugin; and, whatever refers
to it, while it is younger than the grace period (an archive is uploaded before the preview
that names it; every upload of the same content renews the blob). The rest is deleted: the
capsules and archives of previews never confirmed, archives uploaded and never used.

A pass lists the store once and asks the database about its old blobs in batches, one short
transaction per batch and none held while it deletes. Several control planes may collect at
once: deleting twice is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from application.context import Context
from application.policy import require
from domain.auth import Principal, Role
from domain.blob_ports import StoredBlob

log = logging.getLogger(__name__)

BATCH = 1000


@dataclass(slots=True)
class Collected:
    kept: int = 0  # blobs in use, or younger than the grace
    deleted: int = 0  # (with dry_run: that would be deleted)
    freed_bytes: int = 0
    deleted_digests: list[str] = field(default_factory=list)  # the first 100

    def to_dict(self) -> dict[str, object]:
        return {
            "kept": self.kept,
            "deleted": self.deleted,
            "freed_bytes": self.freed_bytes,
            "deleted_digests": self.deleted_digests,
        }


async def collect_as(
    ctx: Context, principal: Principal, grace: timedelta | None, *, dry_run: bool
) -> Collected:
    """A pass an admin asked for (``tp admin blobs collect``); the configured grace by default."""
    require(principal, (Role.ADMIN,), "collect unused blobs")
    return await collect_blobs(
        ctx, ctx.limits.blob_grace if grace is None else grace, dry_run=dry_run
    )


async def collect_blobs(ctx: Context, grace: timedelta, *, dry_run: bool = False) -> Collected:
    """One pass; with ``dry_run`` nothing is deleted, only counted."""
    if grace < timedelta(0):
        raise ValueError("the grace period cannot be negative")
    now = ctx.clock.now()
    cutoff = now - grace
    out = Collected()
    batch: list[StoredBlob] = []
    async for blob in ctx.blob_store().listing():
        if blob.stored_at > cutoff:
            out.kept += 1
            continue
        batch.append(blob)
        if len(batch) >= BATCH:
            await _sweep(ctx, batch, out, dry_run)
            batch = []
    if batch:
        await _sweep(ctx, batch, out, dry_run)
    return out


async def _sweep(ctx: Context, old: list[StoredBlob], out: Collected, dry_run: bool) -> None:
    async with ctx.units.artifacts() as uow:
        used = await uow.blob_refs.referenced([b.digest for b in old], ctx.clock.now())
    for blob in old:
        if blob.digest in used:
            out.kept += 1
            continue
        if not dry_run:
            await ctx.blob_store().delete(blob.digest)
        out.deleted += 1
        out.freed_bytes += blob.size
        if len(out.deleted_digests) < 100:
            out.deleted_digests.append(blob.digest)


async def keep_collecting(ctx: Context, every: timedelta, grace: timedelta) -> None:
    """A pass every ``every``, forever; a failed pass (the store or the database away) is
    logged and tried again at the next period."""
    while True:
        await asyncio.sleep(every.total_seconds())
        try:
            done = await collect_blobs(ctx, grace)
        except Exception:  # the store or the database away: the next period tries again
            log.exception("blob collection failed, trying again later")
            continue
        if done.deleted:
            log.info("blob collection deleted %d blobs (%d bytes)", done.deleted, done.freed_bytes)
