"""Content-addressed blob store on a local (or shared) file system.

Layout: ``<root>/sha256/<2 hex>/<64 hex>``. Writes go to ``<root>/tmp`` first and are renamed
into place once the digest is known, so a reader never sees a partial blob and an interrupted
upload leaves nothing behind but a temporary file that is deleted on the spot. A read checks
that the bytes hash to their name: a file changed behind TunePlane's back is refused.

The errors every blob store raises (this one, ``adapters/blobs_s3.py``) are made here, so that
both say the same thing (``tests/contract/test_blob_stores.py`` runs one contract on both).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from adapters.blob_files import (
    BACKDATE_NS,
    STAMP_SECONDS,
    Changed,
    NotRegular,
    Stamp,
    Stamps,
    copy_in,
    durable,
    hash_copy,
    hash_fd,
    open_regular,
    place,
)
from domain.blob_ports import StoredBlob
from domain.errors import InvalidInput, NotFound, TooLarge, Unavailable
from domain.submission import DIGEST_RE

_LARGE = 8 * 1024 * 1024  # read size when streaming a file
_OFFLOAD = 1024 * 1024  # a chunk this large is hashed and written in a worker thread


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


async def file_chunks(path: str, beneath: str | None = None) -> AsyncIterator[bytes]:
    """A regular file's content (``open_regular``: InvalidInput for a link, or a file not under
    ``beneath``), read in a worker thread a large chunk at a time (a store that streams what it
    stores: ``put_file`` over ``put``; a node sending a checkpoint's file)."""
    try:
        fd = await asyncio.to_thread(open_regular, path, beneath)
    except NotRegular as exc:
        raise InvalidInput(
            f"{exc} (a regular file where it was listed is read, nothing else)",
            fix="store regular files only; a checkpoint's links are left out",
        ) from None
    with os.fdopen(fd, "rb") as f:
        while chunk := await asyncio.to_thread(f.read, _LARGE):
            yield chunk


async def write_file(path: str, data: bytes) -> None:
    """A new file holding ``data`` (a store that reads what it hands out: ``copy_to``)."""
    await asyncio.to_thread(Path(path).write_bytes, data)


def corrupt_blob(digest: str, found: str, where: str) -> NotFound:
    """A stored object whose bytes are not the content its name promises: the blob asked
    for is not there (NotFound: a job that needs it fails, a plugin fails its integrity
    check), and the message says why."""
    return NotFound(
        f"blob {digest} fails its digest check: the bytes stored at {where} hash to {found} "
        "(changed or damaged outside TunePlane)",
        fix="delete that object and upload the same content again, or restore it from a backup",
    )


def changed_blob(digest: str, where: str) -> NotFound:
    """A blob file that changed while it was being proved or handed out: refused as a
    damaged one is (and whatever was placed of it removed)."""
    return NotFound(
        f"blob {digest} changed at {where} while it was read (written outside TunePlane)",
        fix="stop whatever writes into the blob store, then delete that file and upload the "
        "same content again",
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
    def __init__(self, root: Path, stamp_seconds: float = STAMP_SECONDS) -> None:
        self.root = root
        self.stamps = Stamps(stamp_seconds)  # blobs hashed by this process, unchanged since
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

                def take(chunk: bytes) -> None:
                    hasher.update(chunk)
                    out.write(chunk)

                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_size:
                        raise too_large(max_size)
                    if len(chunk) >= _OFFLOAD:  # off the event loop: other puts, requests go on
                        await asyncio.to_thread(take, chunk)
                    else:
                        take(chunk)
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

    async def put_file(
        self, path: str, max_size: int, beneath: str | None = None
    ) -> tuple[str, int]:
        """The file copied by the kernel into a temporary file (no bytes through this
        process), then the copy hashed while it is written to disk, made read-only and stamped
        (``adapters/blob_files.py``): the digest is the stored bytes' even if the file changes
        meanwhile, and the blob is on disk when this returns."""
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        os.close(fd)

        def stored() -> tuple[str, int]:
            try:
                copied = copy_in(path, tmp, max_size, beneath)
            except NotRegular as exc:
                raise InvalidInput(
                    f"{exc} (a regular file where it was listed is stored, nothing else)",
                    fix="store regular files only; a checkpoint's links are left out",
                ) from None
            if copied > max_size:
                raise too_large(max_size)
            copy = os.open(tmp, os.O_RDONLY)
            try:
                hashed_at = time.monotonic()
                try:
                    digest, size, stamp = hash_copy(copy)
                except Changed:
                    raise Unavailable(
                        f"the blob store's copy of {path} changed while it was hashed",
                        fix=f"something writes into {self.root / 'tmp'}: stop it, then retry",
                    ) from None
                if size > max_size:
                    raise too_large(max_size)
                final = self._path(digest)
                made = not final.parent.is_dir()
                final.parent.mkdir(exist_ok=True)
                os.replace(tmp, final)
                durable(copy, str(final.parent), *([str(final.parent.parent)] if made else []))
                placed = Stamp.of(os.fstat(copy))
                if placed.same_bytes(stamp):  # the rename changed its ctime only
                    self.stamps.record(digest, placed, hashed_at)
                return digest, size
            finally:
                os.close(copy)

        try:
            return await asyncio.to_thread(stored)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    async def copy_to(self, digest: str, path: str) -> None:
        """The blob at the new path ``path``, hard-linked (or copied across filesystems) once
        its bytes are proved: hashed now, or stamped by this process when it hashed them and
        unchanged since (``adapters/blob_files.py`` says why that is a proof, and what it does
        not cover)."""
        source = self._path(digest)

        def handed_out() -> None:
            try:
                fd = os.open(source, os.O_RDONLY)
            except FileNotFoundError:
                raise NotFound(f"no blob {digest}", fix="upload it again") from None
            try:
                proved = self._proved(digest, fd, str(source))
                place(fd, path)
                now = Stamp.of(os.fstat(fd))
                if not now.same_bytes(proved[0]):
                    os.unlink(path)
                    raise changed_blob(digest, str(source))
                if proved[1] is not None:  # the link changed its ctime: still the bytes hashed
                    self.stamps.record(digest, now, proved[1])
            finally:
                os.close(fd)

        await asyncio.to_thread(handed_out)

    def _proved(self, digest: str, fd: int, where: str) -> tuple[Stamp, float | None]:
        """The open blob file's stamp once its bytes are proved to be ``digest``'s, and when
        they were hashed when that may spare a later hash (None: not stamped)."""
        stamp = Stamp.of(os.fstat(fd))
        hashed_at = self.stamps.hashed_at(digest, stamp)
        if hashed_at is not None:
            return stamp, hashed_at
        started, hashed_at = time.time_ns(), time.monotonic()
        found, _ = hash_fd(fd)
        if found != digest:
            raise corrupt_blob(digest, found, where)
        after = Stamp.of(os.fstat(fd))
        if not after.same_bytes(stamp):  # its ctime changes if another copy_to links it
            raise changed_blob(digest, where)
        if after.mtime_ns > started - BACKDATE_NS:
            return after, None  # written too recently for its mtime to show a later write
        return after, hashed_at

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

    async def chunks(self, digest: str) -> AsyncIterator[bytes]:
        path = self._path(digest)
        if not path.is_file():
            raise NotFound(f"no blob {digest}", fix="upload it again")
        async for chunk in file_chunks(str(path)):
            yield chunk

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
        self.stamps.forget(digest)
        with contextlib.suppress(FileNotFoundError):
            self._path(digest).unlink()
