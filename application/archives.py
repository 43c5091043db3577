"""Source archives: content-addressed uploads with a size limit and an optional digest check."""

from __future__ import annotations

from collections.abc import AsyncIterator

from application.context import Context
from domain.auth import Principal
from domain.errors import Forbidden, TooLarge
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
    size is over the limit, or when its content does not match the declared digest."""
    if not principal.can_submit:
        raise Forbidden(f"user {principal.name} may not upload", fix="ask for a member token")
    limit = ctx.limits.max_archive_bytes
    if declared_size is not None and declared_size > limit:
        raise TooLarge(
            f"the archive is {declared_size} bytes; the limit is {limit}",
            fix="make the source smaller (ignore data and checkpoints in .gitignore)",
        )
    digest, size = await ctx.blobs.put(chunks, limit, expected=declared_digest)
    return SourceRef(digest, size)
