"""Content-addressed blob store on a local (or shared) file system.

Layout: ``<root>/sha256/<2 hex>/<64 hex>``. Writes go to ``<root>/tmp`` first and are renamed
into place once the digest is known, so a reader never sees a partial blob and an interrupted
upload leaves nothing behind but a temporary file that is deleted on the spot. A read checks
that the bytes hash to their name: a file changed behind TunePlane's back is refused.

The errors every blob store raises (this one, ``adapters/blobs_s3.py``) are made here, so that
both say the same thing (``tests/contract/test_blob_stores.py`` runs one contract on both).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from domain.blob_ports import StoredBlob
from domain.errors import InvalidInput, NotFound, TooLarge
from domain.submission import DIGEST_RE


def too_large(max_size: int) -> TooLarge:
    return TooLarge(
        f"the upload exceeds the limit of {max_size} bytes",
        fix="make the source smaller (ignore data and checkpoints in .gitignore) or ask the "
        "operator to raise the limit",
    )


def digest_mismatch(digest: str, expected: str) -> InvalidInput:
    return InvalidInput(
        f"the content's digest is {digest}, not the declared {expected}",
        fix="the upload was corrupted or the declared digest is wrong: pack and upload again",
        field="header.X-Content-Digest",
    )


def corrupt_blob(digest: str, found: str, where: str) -> NotFound:
    """A stored object whose bytes are not the content its name promises: the blob asked
    for is not there (NotFound: a job that needs it fails, a plugin fails its integrity
    check), and the message says why."""
    return NotFound(
        f"blob {digest} fails its digest check: the bytes stored at {where} hash to {found} "
        "(changed or damaged outside TunePlane)",
        fix="delete that object and upload the same content again, or restore it from a backup",
    )


def check_digest(digest: str) -> None:
    """Refuse what is not a ``sha256:<64 hex>`` digest (a path or key made of it must not
    escape the store)."""
    if not DIGEST_RE.fullmatch(digest):
        raise InvalidInput(
            f"{digest!r} is not a sha256 digest",
            fix="use the `sha256:<64 hex>` digest that the upload returned",
            field="digest",
        )


class FilesystemBlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        (root / "sha256").mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        check_digest(digest)
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
                        raise too_large(max_size)
                    hasher.update(chunk)
                    out.write(chunk)
            digest = "sha256:" + hasher.hexdigest()
            if expected is not None and expected != digest:
                raise digest_mismatch(digest, expected)
            final = self._path(digest)
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)  # a new file: stored again, its time renewed
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
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no blob {digest}", fix="upload it again") from None
        found = "sha256:" + hashlib.sha256(data).hexdigest()
        if found != digest:
            raise corrupt_blob(digest, found, str(path))
        return data

    async def listing(self) -> AsyncIterator[StoredBlob]:
        for shard in sorted((self.root / "sha256").iterdir()):
            for path in sorted(shard.iterdir()) if shard.is_dir() else ():
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # deleted meanwhile
                at = datetime.fromtimestamp(st.st_mtime, UTC)
                yield StoredBlob("sha256:" + path.name, st.st_size, at)

    async def delete(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(digest).unlink()
