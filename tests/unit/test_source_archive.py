"""domain.tarball.check_source: what a source archive may hold (issue 18, defect 9: any bytes
were stored, and the member failed only when the runner could not unpack them, exit 94)."""

from __future__ import annotations

import bz2
import gzip
import tarfile

import pytest

from domain.errors import InvalidInput, TooLarge
from domain.tarball import MAX_SOURCE_ENTRIES, check_source
from tests.support.archives import tar_gz

pytestmark = pytest.mark.unit
MiB = 1024 * 1024


def gz(data: bytes) -> bytes:
    """Compressed with no time in its header, so that the parametrized ids below are the same
    in every pytest-xdist worker's collection (a gzip header's time differs across a second)."""
    return gzip.compress(data, mtime=0)


def check(data: bytes, max_unpacked: int = MiB) -> None:
    check_source(data, max_unpacked=max_unpacked, field="body")


def raw_tar(*entries: tarfile.TarInfo, data: bytes = b"") -> bytes:
    """A plain tar of bare headers (sizes as declared, content ``data`` after the last)."""
    return b"".join(e.tobuf(tarfile.PAX_FORMAT) for e in entries) + data + b"\0" * 1024


def entry(
    name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, link
    return info


def test_what_tp_submit_packs_is_accepted() -> None:
    check(tar_gz({"train.py": b"print(1)\n", "conf/a.yaml": b"a: 1\n"}, {"latest": "conf/a.yaml"}))
    check(tar_gz({"a/b.txt": b"x"}, {"a/up": "../a/b.txt"}))  # relative, stays inside
    check(tar_gz({}))  # an experiment of nothing
    plain = raw_tar(
        entry("./dir", tarfile.DIRTYPE), entry("./dir/f", size=1), data=b"x" + b"\0" * 511
    )
    check(plain)  # plain (uncompressed) tars unpack too, and a leading ./ is fine
    check(gz(raw_tar(entry("f"), entry("h", tarfile.LNKTYPE, link="f"))))


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (b"not an archive at all, just text", "not a readable gzip-compressed tar"),
        (b"\x1f\x8b\x08garbage", "not a readable gzip-compressed tar"),
        (bz2.compress(raw_tar(entry("f"))), "not a readable gzip-compressed tar"),
        (gz(b"x" * 700), "not a readable gzip-compressed tar"),
        (gz(raw_tar(entry("/etc/passwd"))), "unsafe path '/etc/passwd'"),
        (gz(raw_tar(entry("a/../../x"))), "unsafe path"),
        (gz(raw_tar(entry("a\nb"))), "unsafe path"),
        (gz(raw_tar(entry("l", tarfile.SYMTYPE, link="/etc"))), "outside"),
        (gz(raw_tar(entry("a/l", tarfile.SYMTYPE, link="../../x"))), "outside"),
        (
            gz(raw_tar(entry("l", tarfile.SYMTYPE, link="sub"), entry("l/f"))),
            "written through the symbolic link 'l'",
        ),
        (gz(raw_tar(entry("h", tarfile.LNKTYPE, link="/etc/shadow"))), "hard link"),
        (
            gz(raw_tar(entry("h", tarfile.LNKTYPE, link="later"), entry("later"))),
            "not an earlier file",
        ),
        (gz(raw_tar(entry("dev", tarfile.CHRTYPE))), "special file"),
        (gz(raw_tar(entry("fifo", tarfile.FIFOTYPE))), "special file"),
    ],
)
def test_what_the_runner_could_not_unpack_safely_is_refused(data: bytes, words: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check(data)
    assert words in err.value.message and err.value.fix and err.value.field == "body"


def test_unpacked_size_and_entry_count_are_bounded_before_the_data_is_read() -> None:
    bomb = gz(raw_tar(entry("zeros", size=2**40)))  # declares a TiB, holds nothing
    with pytest.raises(TooLarge, match="more than"):
        check(bomb)
    with pytest.raises(TooLarge):
        check(tar_gz({"a": b"x" * 600, "b": b"y" * 600}), max_unpacked=1000)
    many = gz(raw_tar(*(entry(f"d{i}", tarfile.DIRTYPE) for i in range(11))))
    check_source(many, max_unpacked=MiB, field="body", max_entries=11)
    with pytest.raises(TooLarge, match="more than 10 entries"):
        check_source(many, max_unpacked=MiB, field="body", max_entries=10)
    assert MAX_SOURCE_ENTRIES == 100_000
