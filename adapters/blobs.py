"""Content-addressed blob store on a local (or shared) file system.

Layout: ``<root>/sha256/<2 hex>/<64 hex>``. Writes go to ``<root>/tmp`` first and are renamed
into place once the digest is known, so a reader never sees a partial blob and an interrupted
upload leaves nothing behind but a temporary file that is deleted on the spot.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from domain.errors import InvalidInput, NotFound, TooLarge
from domain.submission import DIGEST_RE


class FilesystemBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        (root / "sha256").mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        if not DIGEST_RE.match(digest):
            raise InvalidInput(
                f"{digest!r} is not a sha256 digest",
                fix="use the `sha256:<64 hex>` digest that the upload returned",
                field="digest",
            )
        hexdigest = digest.removeprefix("sha256:")
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    async def put(
        self, chunks: AsyncIterator[bytes], max_size: int, expected: str | None = None
    ) -> tuple[str, int]:
        hasher = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_size:
                        raise TooLarge(
                            f"the upload exceeds the limit of {max_size} bytes",
                            fix="make the source smaller (ignore data and checkpoints in "
                            ".gitignore) or ask the operator to raise the limit",
                        )
                    hasher.update(chunk)
                    out.write(chunk)
            digest = "sha256:" + hasher.hexdigest()
            if expected is not None and expected != digest:
                raise InvalidInput(
                    f"the content's digest is {digest}, not the declared {expected}",
                    fix="the upload was corrupted or the declared digest is wrong: "
                    "pack and upload again",
                    field="header.X-Content-Digest",
                )
            final = self._path(digest)
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
            return digest, size
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # already renamed into place unless something failed

    async def size(self, digest: str) -> int | None:
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError:
            return None

    async def read(self, digest: str) -> bytes:
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no blob {digest}", fix="upload it again") from None
