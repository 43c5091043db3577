"""Receiving an upload whole (source archives, plugin packages) before it is checked."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from domain.errors import InvalidInput, TooLarge


async def receive(
    chunks: AsyncIterator[bytes],
    *,
    limit: int,
    declared_size: int | None,
    declared_digest: str | None,
    what: str,
    smaller: str,
) -> bytes:
    """The body of ``chunks``, held in memory: TooLarge (fix ``smaller``) when its declared or
    actual size is over ``limit``, before more is read; InvalidInput when it is not the content
    of ``declared_digest`` (the ``X-Content-Digest`` header). Nothing is stored here."""
    if declared_size is not None and declared_size > limit:
        raise TooLarge(f"{what} is {declared_size} bytes; the limit is {limit}", fix=smaller)
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"{what} is over the limit of {limit} bytes", fix=smaller)
        parts.append(chunk)
    data = b"".join(parts)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if declared_digest is not None and declared_digest != digest:
        raise InvalidInput(
            f"the content's digest is {digest}, not the declared {declared_digest}",
            fix="the upload was corrupted or the declared digest is wrong: send it again",
            field="header.X-Content-Digest",
        )
    return data
