"""Contract: the BlobStore port (domain/ports.py), the same assertions on every adapter.

``memory``: adapters/sim/blobs.py (the simulator's and unit tests' twin).
``filesystem``: adapters/blobs.py in a temporary directory. ``s3``: adapters/blobs_s3.py under
a fresh prefix of a real SeaweedFS server's bucket (tests/fixtures/s3.py), with the smallest
part size S3 allows (5 MiB) so that the "large" blobs below go through multipart uploads.

"Nothing left" is checked on the backing storage itself: the memory store's dictionary, every
file under the store's root (temporary files included), or every object and every unfinished
multipart upload under the prefix.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.blobs import FilesystemBlobStore
from adapters.blobs_s3 import S3BlobStore, S3Location
from adapters.sim.blobs import MemoryBlobStore
from domain.blob_ports import BlobStore
from domain.errors import InvalidInput, NotFound, TooLarge
from tests.fixtures.s3 import S3Server

pytestmark = pytest.mark.contract

PART = 5 * 1024 * 1024
SMALL = b"print('hello')\n" * 100
LARGE = os.urandom(2 * PART + 123)  # three parts on S3


@dataclass
class Rig:
    store: BlobStore
    stored: Callable[[], Awaitable[set[str]]]  # what the backing storage holds, by name
    name_of: Callable[[str], str]  # the name a digest is stored under
    tamper: Callable[[str, bytes], Awaitable[None]]  # replace a stored blob's bytes


@pytest.fixture(params=["memory", "filesystem", "s3"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    if request.param == "memory":
        memory = MemoryBlobStore()

        async def held() -> set[str]:
            return set(memory.blobs)

        async def replace(digest: str, data: bytes) -> None:
            memory.blobs[digest] = data

        yield Rig(memory, held, lambda d: d, replace)
        return
    if request.param == "filesystem":
        root = tmp_path / "blobs"
        fs = FilesystemBlobStore(root)

        def path_of(digest: str) -> Path:
            hexdigest = digest.removeprefix("sha256:")
            return root / "sha256" / hexdigest[:2] / hexdigest

        async def files() -> set[str]:
            return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}

        async def rewrite(digest: str, data: bytes) -> None:
            path_of(digest).write_bytes(data)

        yield Rig(fs, files, lambda d: str(path_of(d).relative_to(root)), rewrite)
        return
    server: S3Server = request.getfixturevalue("s3_server")
    bucket, prefix = server.bucket, str(request.getfixturevalue("s3_prefix"))
    location = S3Location(bucket, prefix)
    async with (
        server.client() as s3,
        S3BlobStore.connect(
            location,
            endpoint_url=server.endpoint,
            access_key=server.access_key,
            secret_key=server.secret_key,
            part_size=PART,
        ) as store,
    ):

        async def objects() -> set[str]:
            listed = await s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
            uploads = await s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
            return {o["Key"] for o in listed.get("Contents", [])} | {
                "upload:" + u["Key"] for u in uploads.get("Uploads", [])
            }

        async def overwrite(digest: str, data: bytes) -> None:
            await s3.put_object(Bucket=bucket, Key=key_of(digest), Body=data)

        def key_of(digest: str) -> str:
            return prefix + "sha256/" + digest.removeprefix("sha256:")

        yield Rig(store, objects, key_of, overwrite)


async def stream(data: bytes, chunk: int = 1024 * 1024) -> AsyncIterator[bytes]:
    for offset in range(0, len(data), chunk):
        yield data[offset : offset + chunk]


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "data",
    [SMALL, b"", LARGE, LARGE[:PART], LARGE[: 2 * PART]],
    ids=["small", "empty", "large", "one-part", "two-parts"],
)
async def test_put_stores_the_content_under_its_digest(rig: Rig, data: bytes) -> None:
    digest, size = await rig.store.put(stream(data), max_size=len(data))
    assert (digest, size) == (digest_of(data), len(data))
    assert await rig.store.size(digest) == len(data)
    assert await rig.store.read(digest) == data
    assert await rig.stored() == {rig.name_of(digest)}


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_put_with_the_right_expected_digest(rig: Rig, data: bytes) -> None:
    for _ in range(2):  # the second time the content is already there
        digest, size = await rig.store.put(stream(data), len(data), expected=digest_of(data))
        assert (digest, size) == (digest_of(data), len(data))
    assert await rig.store.read(digest) == data
    assert await rig.stored() == {rig.name_of(digest)}


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_put_is_idempotent_for_identical_content(rig: Rig, data: bytes) -> None:
    first = await rig.store.put(stream(data), max_size=len(data))
    again = await rig.store.put(stream(data, chunk=777), max_size=len(data) + 1)
    assert first == again
    other = await rig.store.put(stream(data + b"!"), max_size=len(data) + 1)
    assert other[0] != first[0]
    assert await rig.stored() == {rig.name_of(first[0]), rig.name_of(other[0])}


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_too_large_leaves_nothing(rig: Rig, data: bytes) -> None:
    with pytest.raises(TooLarge, match=f"limit of {len(data) - 1} bytes"):
        await rig.store.put(stream(data), max_size=len(data) - 1)
    assert await rig.stored() == set()
    assert await rig.store.size(digest_of(data)) is None


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_expected_digest_mismatch_leaves_nothing(rig: Rig, data: bytes) -> None:
    declared = digest_of(b"something else")
    with pytest.raises(InvalidInput, match="not the declared") as refused:
        await rig.store.put(stream(data), len(data), expected=declared)
    assert refused.value.field == "header.X-Content-Digest"
    assert await rig.stored() == set()
    assert await rig.store.size(declared) is None
    assert await rig.store.size(digest_of(data)) is None


async def test_a_stream_that_breaks_leaves_nothing(rig: Rig) -> None:
    async def broken() -> AsyncIterator[bytes]:
        async for chunk in stream(LARGE):
            yield chunk
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        await rig.store.put(broken(), max_size=len(LARGE) * 2)
    assert await rig.stored() == set()


async def test_absent_blobs(rig: Rig) -> None:
    digest = digest_of(b"never stored")
    assert await rig.store.size(digest) is None
    with pytest.raises(NotFound, match=f"no blob {digest}"):
        await rig.store.read(digest)
    with pytest.raises(InvalidInput, match="not a sha256 digest"):
        await rig.store.read("sha256:../../etc/passwd")


@pytest.mark.parametrize("replacement", [b"evil", SMALL[:-1] + b"!"], ids=["resized", "same-size"])
async def test_a_tampered_blob_is_refused(rig: Rig, replacement: bytes) -> None:
    digest, _ = await rig.store.put(stream(SMALL), max_size=len(SMALL))
    await rig.tamper(digest, replacement)
    with pytest.raises(NotFound, match="fails its digest check") as refused:
        await rig.store.read(digest)
    assert digest_of(replacement) in refused.value.message
    assert "delete that object and upload the same content again" in refused.value.fix


async def test_putting_the_same_content_again_repairs_a_damaged_blob(rig: Rig) -> None:
    digest, _ = await rig.store.put(stream(SMALL), max_size=len(SMALL))
    await rig.tamper(digest, SMALL[:-1] + b"!")  # the same size
    assert await rig.store.put(stream(SMALL), max_size=len(SMALL)) == (digest, len(SMALL))
    assert await rig.store.read(digest) == SMALL


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_concurrent_puts_of_the_same_content(rig: Rig, data: bytes) -> None:
    results = await asyncio.gather(*(rig.store.put(stream(data), len(data)) for _ in range(4)))
    assert set(results) == {(digest_of(data), len(data))}
    assert await rig.store.read(digest_of(data)) == data
    assert await rig.stored() == {rig.name_of(digest_of(data))}


async def listed(store: BlobStore) -> dict[str, tuple[int, float]]:
    return {b.digest: (b.size, b.stored_at.timestamp()) async for b in store.listing()}


async def test_the_listing_names_every_blob_with_its_size_and_time(rig: Rig) -> None:
    assert await listed(rig.store) == {}
    small, _ = await rig.store.put(stream(SMALL), len(SMALL))
    empty, _ = await rig.store.put(stream(b""), 0)
    now = time.time()
    found = await listed(rig.store)
    assert {d: size for d, (size, _) in found.items()} == {small: len(SMALL), empty: 0}
    assert all(abs(at - now) < 120 for _, at in found.values())  # the store's clock, not ours


async def test_delete_removes_a_blob_and_missing_is_fine(rig: Rig) -> None:
    keep, _ = await rig.store.put(stream(SMALL), len(SMALL))
    gone, _ = await rig.store.put(stream(LARGE), len(LARGE))
    await rig.store.delete(gone)
    await rig.store.delete(gone)  # again: fine
    await rig.store.delete(digest_of(b"never stored"))
    assert await rig.store.size(gone) is None
    assert list(await listed(rig.store)) == [keep]
    assert await rig.stored() == {rig.name_of(keep)}
    with pytest.raises(InvalidInput, match="not a sha256 digest"):
        await rig.store.delete("../../etc/passwd")


@pytest.mark.parametrize("data", [SMALL, LARGE], ids=["small", "large"])
async def test_storing_the_same_content_again_renews_its_time(rig: Rig, data: bytes) -> None:
    digest, _ = await rig.store.put(stream(data), len(data))
    ((_, first),) = (await listed(rig.store)).values()
    await asyncio.sleep(1.1)  # object stores keep whole seconds
    await rig.store.put(stream(data), len(data), expected=digest)
    ((_, renewed),) = (await listed(rig.store)).values()
    assert renewed > first
    assert await rig.store.read(digest) == data


async def test_a_file_is_stored_by_its_content_and_copied_out_verified(
    rig: Rig, tmp_path: Path
) -> None:
    """A checkpoint's files go in with ``put_file`` and come out with ``copy_to``
    (docs/checkpoints.md): the digest is the stored bytes'; a copy out checks it, a damaged blob
    is refused and nothing is left at the target."""
    source = tmp_path / "shard.bin"
    source.write_bytes(LARGE)
    digest, size = await rig.store.put_file(str(source), len(LARGE))
    assert (digest, size) == ("sha256:" + hashlib.sha256(LARGE).hexdigest(), len(LARGE))
    source.write_bytes(b"changed after it was stored")  # the blob keeps what was stored
    out = tmp_path / "out.bin"
    await rig.store.copy_to(digest, str(out))
    assert out.read_bytes() == LARGE
    with pytest.raises(TooLarge):
        await rig.store.put_file(str(source), 3)
    await rig.tamper(digest, b"not what was stored")
    damaged = tmp_path / "damaged.bin"
    with pytest.raises(NotFound):
        await rig.store.copy_to(digest, str(damaged))
    assert not damaged.exists()
    with pytest.raises(NotFound):
        await rig.store.copy_to("sha256:" + "0" * 64, str(tmp_path / "absent.bin"))


@pytest.mark.parametrize("data", [SMALL, b"", LARGE], ids=["small", "empty", "large"])
async def test_chunks_hand_the_content_out_in_pieces_unchecked(rig: Rig, data: bytes) -> None:
    """``chunks`` (a checkpoint file sent to a node) streams what is stored; the reader, not
    the store, checks the digest of what it got, so a damaged blob comes out as it is."""
    digest, _ = await rig.store.put(stream(data), max_size=len(data))
    pieces = [c async for c in rig.store.chunks(digest)]
    assert b"".join(pieces) == data
    assert all(len(p) <= 8 * 1024 * 1024 for p in pieces)  # never the whole of a large blob
    assert len(pieces) > 1 or len(data) <= 8 * 1024 * 1024
    await rig.tamper(digest, b"evil")
    assert b"".join([c async for c in rig.store.chunks(digest)]) == b"evil"
    with pytest.raises(NotFound, match="no blob"):
        _ = [c async for c in rig.store.chunks(digest_of(b"never stored"))]
    with pytest.raises(InvalidInput, match="not a sha256 digest"):
        _ = [c async for c in rig.store.chunks("sha256:../../etc/passwd")]


async def test_a_file_is_stored_only_from_where_it_was_listed(rig: Rig, tmp_path: Path) -> None:
    """``put_file`` stores a regular file, and given ``beneath`` (its checkpoint's directory)
    only one that is under it once opened: a link, or a file reached through a directory a
    workload swapped for a link to elsewhere, is refused and nothing is stored."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "key.pem").write_bytes(b"a secret of this host")
    checkpoint = tmp_path / "work" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    (checkpoint / "key.pem").write_bytes(b"the workload's")
    (checkpoint / "link.pem").symlink_to(host / "key.pem")
    listed = str(checkpoint / "key.pem")
    digest, _ = await rig.store.put_file(listed, 1024, beneath=str(checkpoint))
    assert await rig.store.read(digest) == b"the workload's"
    with pytest.raises(InvalidInput, match="symbolic link"):
        await rig.store.put_file(str(checkpoint / "link.pem"), 1024, beneath=str(checkpoint))
    (checkpoint / "link.pem").unlink()
    swapped = tmp_path / "work" / "swapped"
    checkpoint.rename(swapped)
    checkpoint.symlink_to(host, target_is_directory=True)  # after the listing
    with pytest.raises(InvalidInput, match="not under"):
        await rig.store.put_file(listed, 1024, beneath=str(checkpoint))
    assert await rig.stored() == {rig.name_of(digest)}
