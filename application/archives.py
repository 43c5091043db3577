"""Source archives: content-addressed uploads with a size limit, an optional digest check, and
the check that the bytes are an archive the capsule runner can unpack (``domain.tarball``)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

from application.context import Context
from domain import tarball
from domain.auth import Principal
from domain.errors import Forbidden, InvalidInput, TooLarge
from domain.submission import SourceRef


def _too_large(size: str, limit: int) -> TooLarge:
    return TooLarge(
        f"the archive is {size} bytes; the limit is {limit}",
        fix="make the source smaller (ignore data and checkpoints in .gitignore)",
    )


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
    if declared_size is not None and declared_size > limit:
        raise _too_large(str(declared_size), limit)
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(f"over {limit}", limit)
        parts.append(chunk)
    data = b"".join(parts)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if declared_digest is not None and declared_digest != digest:
        raise InvalidInput(
            f"the content's digest is {digest}, not the declared {declared_digest}",
            fix="the upload was corrupted or the declared digest is wrong: pack and upload again",
            field="header.X-Content-Digest",
        )
    await check_source(ctx, data, "body")

    async def once() -> AsyncIterator[bytes]:
        yield data

    stored, size = await ctx.blobs.put(once(), limit, expected=digest)
    return SourceRef(stored, size)


async def check_source(ctx: Context, data: bytes, field: str) -> None:
    """``tarball.check_source`` on a worker thread (it decompresses the whole archive)."""
    unpacked = ctx.limits.max_archive_unpacked_bytes
    await asyncio.to_thread(tarball.check_source, data, max_unpacked=unpacked, field=field)
