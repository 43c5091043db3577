"""Source archives: content-addressed uploads with a size limit, an optional digest check, and
the check that the bytes are an archive the capsule runner can unpack (``domain.tarball``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from application.context import Context
from application.uploads import receive
from domain import tarball
from domain.auth import Principal
from domain.errors import Forbidden
from domain.submission import SourceRef


async def upload_archive(
    ctx: Context,
    principal: Principal,
    chunks: AsyncIterator[bytes],
    *,
    declared_size: int | None,
    declared_digest: str | None,
) -> SourceRef:
    """Store an archive. Refused, with nothing stored, when its declared size or its actual
    size is over the limit, when its content does not match the declared digest, or when it is
    not a source archive the runner would unpack (``tarball.check_source``). The body is held
    in memory (at most the limit) while it is checked, as a preview holds it."""
    if not principal.can_submit:
        raise Forbidden(f"user {principal.name} may not upload", fix="ask for a member token")
    limit = ctx.limits.max_archive_bytes
    data = await receive(
        chunks,
        limit=limit,
        declared_size=declared_size,
        declared_digest=declared_digest,
        what="the archive",
        smaller="make the source smaller (ignore data and checkpoints in .gitignore)",
    )
    await check_source(ctx, data, "body")

    async def once() -> AsyncIterator[bytes]:
        yield data

    stored, size = await ctx.blob_store().put(once(), limit)
    return SourceRef(stored, size)


async def check_source(ctx: Context, data: bytes, field: str) -> None:
    """``tarball.check_source`` on a worker thread (it decompresses the whole archive)."""
    unpacked = ctx.limits.max_archive_unpacked_bytes
    await asyncio.to_thread(tarball.check_source, data, max_unpacked=unpacked, field=field)
