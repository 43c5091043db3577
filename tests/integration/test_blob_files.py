"""The filesystem blob store's one hash pass per hand-over (adapters/blob_files.py): a file
stored with ``put_file`` is hashed once, read-only, on disk, and handed out by ``copy_to``
without a second pass while its stamp proves it unchanged; every way of changing it after it
was hashed makes ``copy_to`` hash it again and refuse it. What every store does is
tests/contract/test_blob_stores.py."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters import blob_files, blobs
from adapters.blobs import FilesystemBlobStore
from domain.errors import InvalidInput, NotFound, Unavailable

pytestmark = pytest.mark.integration

DATA = os.urandom(3 * 1024 * 1024 + 17)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of full hash passes over blob files, as they happen."""
    counted: list[int] = [0]
    real = blob_files.hash_fd

    def counting(fd: int) -> tuple[str, int]:
        counted[0] += 1
        return real(fd)

    monkeypatch.setattr(blob_files, "hash_fd", counting)
    monkeypatch.setattr(blobs, "hash_fd", counting)
    return counted


async def stored(tmp_path: Path, store: FilesystemBlobStore) -> tuple[str, Path]:
    source = tmp_path / "shard.bin"
    source.write_bytes(DATA)
    digest, _ = await store.put_file(str(source), len(DATA))
    hexdigest = digest.removeprefix("sha256:")
    return digest, store.root / "sha256" / hexdigest[:2] / hexdigest


async def test_a_stored_file_is_hashed_once_and_handed_out_by_link(
    tmp_path: Path, passes: list[int]
) -> None:
    store = FilesystemBlobStore(tmp_path / "blobs")
    digest, blob = await stored(tmp_path, store)
    assert passes[0] == 1
    assert stat.S_IMODE(blob.stat().st_mode) == 0o400  # never written in place
    for name in ("a.bin", "b.bin"):  # the first link changed its ctime: still proved
        await store.copy_to(digest, str(tmp_path / name))
        assert (tmp_path / name).stat().st_ino == blob.stat().st_ino
    assert passes[0] == 1
    assert (tmp_path / "b.bin").read_bytes() == DATA
    with pytest.raises(FileExistsError):  # a file there may be another blob's link
        await store.copy_to(digest, str(tmp_path / "a.bin"))
    assert blob.read_bytes() == DATA

    unstamped = FilesystemBlobStore(tmp_path / "blobs", stamp_seconds=0)  # or another process
    await unstamped.copy_to(digest, str(tmp_path / "c.bin"))
    await unstamped.copy_to(digest, str(tmp_path / "d.bin"))
    assert passes[0] == 3


def write_into(path: str | Path, offset: int, data: bytes) -> None:
    """``data`` written at ``offset`` of the existing file (its owner makes a read-only file
    writable first; root writes at once)."""
    if not os.access(path, os.W_OK):
        os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def overwrite(blob: Path) -> None:
    """One byte changed in place, the size kept, at once (in the same clock tick, often)."""
    write_into(blob, 0, bytes([DATA[0] ^ 1]))


def overwrite_and_backdate(blob: Path) -> None:
    before = blob.stat()
    overwrite(blob)
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime as stamped


def replace_with_other(blob: Path) -> None:
    other = blob.with_name("other")
    other.write_bytes(bytes([DATA[0] ^ 1]) + DATA[1:])
    os.utime(other, ns=(blob.stat().st_atime_ns, blob.stat().st_mtime_ns))
    os.replace(other, blob)


def truncate(blob: Path) -> None:
    if not os.access(blob, os.W_OK):
        os.chmod(blob, 0o600)
    os.truncate(blob, len(DATA) - 1)


@pytest.mark.parametrize(
    "change",
    [overwrite, overwrite_and_backdate, replace_with_other, truncate],
    ids=["in-place", "in-place-mtime-restored", "replaced-same-mtime", "truncated"],
)
async def test_a_blob_changed_after_it_was_hashed_is_refused(
    tmp_path: Path, passes: list[int], change: Callable[[Path], None]
) -> None:
    store = FilesystemBlobStore(tmp_path / "blobs")
    digest, blob = await stored(tmp_path, store)
    change(blob)
    with pytest.raises(NotFound, match="fails its digest check"):
        await store.copy_to(digest, str(tmp_path / "out.bin"))
    assert not (tmp_path / "out.bin").exists()
    assert passes[0] == 2


async def test_a_change_through_a_placed_link_is_seen(tmp_path: Path, passes: list[int]) -> None:
    """The resume directory holds the blob's inode: a write through it (members mount it
    read-only; something on the host) is a change of the blob."""
    store = FilesystemBlobStore(tmp_path / "blobs")
    digest, _ = await stored(tmp_path, store)
    placed = tmp_path / "resume.bin"
    await store.copy_to(digest, str(placed))
    overwrite(placed)
    with pytest.raises(NotFound, match="fails its digest check"):
        await store.copy_to(digest, str(tmp_path / "next.bin"))
    assert passes[0] == 2


async def test_the_same_bytes_stored_again_or_recently_written_are_hashed_again(
    tmp_path: Path, passes: list[int]
) -> None:
    store = FilesystemBlobStore(tmp_path / "blobs")
    digest, blob = await stored(tmp_path, store)
    same = blob.with_name("same")
    same.write_bytes(DATA)  # another inode, the same bytes: handed out once proved
    os.replace(same, blob)
    await store.copy_to(digest, str(tmp_path / "a.bin"))
    assert passes[0] == 2 and (tmp_path / "a.bin").read_bytes() == DATA
    # written just now: its mtime could not show a write in the same tick, so never stamped
    await store.copy_to(digest, str(tmp_path / "b.bin"))
    assert passes[0] == 3
    await store.delete(digest)
    with pytest.raises(NotFound, match="no blob"):
        await store.copy_to(digest, str(tmp_path / "c.bin"))


async def test_across_filesystems_the_proved_bytes_are_copied(
    tmp_path: Path, passes: list[int]
) -> None:
    shm = "/dev/shm"
    try:
        elsewhere = os.stat(shm).st_dev != os.stat(tmp_path).st_dev
    except FileNotFoundError:
        elsewhere = False
    if not elsewhere:
        pytest.skip("no second filesystem to copy to")
    store = FilesystemBlobStore(tmp_path / "blobs")
    digest, blob = await stored(tmp_path, store)
    target = Path(shm) / f"tp-test-{os.getpid()}-{tmp_path.name}.bin"
    try:
        await store.copy_to(digest, str(target))
        assert target.read_bytes() == DATA and target.stat().st_ino != blob.stat().st_ino
    finally:
        target.unlink(missing_ok=True)
    assert passes[0] == 1


async def test_a_blob_written_while_it_is_proved_or_placed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone writing into the store while TunePlane reads it: the copy being hashed is not
    stored; a blob being proved or placed is refused and nothing is left at the target."""
    store = FilesystemBlobStore(tmp_path / "blobs", stamp_seconds=0)
    digest, blob = await stored(tmp_path, store)
    real = blob_files.hash_fd

    def written_meanwhile(fd: int) -> tuple[str, int]:
        found = real(fd)
        write_into(f"/proc/self/fd/{fd}", 0, os.pread(fd, 1, 0))  # the same byte: only its
        return found  # times say it was written

    monkeypatch.setattr(blob_files, "hash_fd", written_meanwhile)
    (tmp_path / "other.bin").write_bytes(DATA[::-1])
    with pytest.raises(Unavailable, match="changed while it was hashed"):
        await store.put_file(str(tmp_path / "other.bin"), len(DATA))
    assert list((store.root / "tmp").iterdir()) == []
    assert {p.name for p in (store.root / "sha256").rglob("*") if p.is_file()} == {blob.name}

    monkeypatch.setattr(blobs, "hash_fd", written_meanwhile)
    with pytest.raises(NotFound, match=r"changed .* while it was read"):
        await store.copy_to(digest, str(tmp_path / "a.bin"))
    assert not (tmp_path / "a.bin").exists()

    monkeypatch.setattr(blobs, "hash_fd", real)
    real_place = blob_files.place

    def placed_then_written(fd: int, path: str) -> None:
        real_place(fd, path)
        os.utime(blob, ns=(0, 0))

    monkeypatch.setattr(blobs, "place", placed_then_written)
    with pytest.raises(NotFound, match=r"changed .* while it was read"):
        await store.copy_to(digest, str(tmp_path / "b.bin"))
    assert not (tmp_path / "b.bin").exists()


async def test_links_made_while_a_blob_is_proved_are_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint holding the same file twice: one copy_to links the blob (its ctime changes)
    while another hashes it, and both place it."""
    store = FilesystemBlobStore(tmp_path / "blobs", stamp_seconds=0)
    digest, blob = await stored(tmp_path, store)
    real = blob_files.hash_fd

    def linked_meanwhile(fd: int) -> tuple[str, int]:
        os.link(blob, tmp_path / "other.bin")
        return real(fd)

    monkeypatch.setattr(blobs, "hash_fd", linked_meanwhile)
    await store.copy_to(digest, str(tmp_path / "a.bin"))
    assert (tmp_path / "a.bin").read_bytes() == DATA
    monkeypatch.setattr(blobs, "hash_fd", real)
    paths = [tmp_path / f"{n}.bin" for n in range(4)]
    await asyncio.gather(*(store.copy_to(digest, str(p)) for p in paths))
    assert all(p.read_bytes() == DATA for p in paths)


async def test_only_a_regular_file_is_stored_and_never_past_the_limit(tmp_path: Path) -> None:
    """A checkpoint's file replaced by a symbolic link (to any file of the host) or a pipe after
    it was listed is refused; a file that grows while it is copied fills no disk."""
    store = FilesystemBlobStore(tmp_path / "blobs")
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"not the workload's")
    (tmp_path / "link.bin").symlink_to(secret)
    os.mkfifo(tmp_path / "pipe")
    for name in ("link.bin", "pipe"):
        with pytest.raises(InvalidInput, match=r"is a symbolic link|is not a regular file"):
            await store.put_file(str(tmp_path / name), 1024)
    assert list((store.root / "tmp").iterdir()) == []
    assert [p for p in (store.root / "sha256").rglob("*") if p.is_file()] == []
    (tmp_path / "empty.bin").write_bytes(b"")
    digest, size = await store.put_file(str(tmp_path / "empty.bin"), 1024)
    await store.copy_to(digest, str(tmp_path / "empty-out.bin"))
    assert size == 0 and (tmp_path / "empty-out.bin").read_bytes() == b""
    (tmp_path / "big.bin").write_bytes(DATA)
    (tmp_path / "target").write_bytes(b"")
    assert blob_files.copy_in(str(tmp_path / "big.bin"), str(tmp_path / "target"), 10) == 11
    assert (tmp_path / "target").stat().st_size == 11
