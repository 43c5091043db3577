"""``FilesystemOutputs.open`` (what an artifact download reads): the file's bytes and size, and
nothing but a regular file below the member's directory: a symbolic link (the last part or one
on the way), a FIFO (which would block a plain open), a directory, or a file gone are refused
with the domain's errors, and a path that is not a manifest's is refused before any open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters.outputs import FilesystemOutputs
from domain.errors import Conflict, InvalidInput, NotFound

pytestmark = pytest.mark.unit


@pytest.fixture
def outputs(tmp_path: Path) -> FilesystemOutputs:
    member = tmp_path / "root" / "job-1" / "att-1" / "0"
    (member / "sub").mkdir(parents=True)
    (member / "sub" / "a.bin").write_bytes(b"x" * (3 * 1024 * 1024 + 5))
    (member / "link").symlink_to(member / "sub" / "a.bin")
    os.mkfifo(member / "fifo")
    (tmp_path / "secret").write_bytes(b"outside")
    (member / "escape").symlink_to(tmp_path)  # a directory link pointing out of the root
    return FilesystemOutputs(tmp_path / "root")


async def read(outputs: FilesystemOutputs, path: str) -> tuple[int, bytes]:
    size, chunks = await outputs.open("job-1", "att-1", 0, path)
    return size, b"".join([c async for c in chunks])


async def test_a_file_is_read_whole_in_chunks(outputs: FilesystemOutputs) -> None:
    size, data = await read(outputs, "sub/a.bin")
    assert size == len(data) == 3 * 1024 * 1024 + 5


@pytest.mark.parametrize("path", ["link", "escape/secret", "fifo", "sub"])
async def test_links_fifos_and_directories_are_refused(
    outputs: FilesystemOutputs, path: str
) -> None:
    with pytest.raises(Conflict):
        await read(outputs, path)


async def test_a_file_gone_is_not_found(outputs: FilesystemOutputs) -> None:
    with pytest.raises(NotFound):
        await read(outputs, "sub/b.bin")


@pytest.mark.parametrize("path", ["../0/sub/a.bin", "/etc/passwd", "sub//a.bin", "a\x00b"])
async def test_a_path_no_manifest_lists_is_refused_before_opening(
    outputs: FilesystemOutputs, path: str
) -> None:
    with pytest.raises(InvalidInput):
        await read(outputs, path)
