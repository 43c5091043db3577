"""domain.tarball.check_source: what a source archive may hold (issue 18, defect 9: any bytes
were stored, and the member failed only when the runner could not unpack them, exit 94)."""

from __future__ import annotations

import bz2
import gzip
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from domain.errors import InvalidInput, TooLarge
from domain.tarball import MAX_LINK_DEPTH, MAX_LINK_PARTS, MAX_SOURCE_ENTRIES, check_source
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


def sym(name: str, target: str) -> tarfile.TarInfo:
    return entry(name, tarfile.SYMTYPE, link=target)


def d(name: str) -> tarfile.TarInfo:
    return entry(name, tarfile.DIRTYPE)


CHAIN = (d("b"), sym("a", "b/.."), sym("c", "a/.."))  # the reported bypass: c resolves to /


def test_a_chain_of_links_that_leads_out_is_refused_as_the_kernel_resolves_it(
    tmp_path: Path,
) -> None:
    """Each link of CHAIN stays inside when read alone; followed through a, c is the parent
    of the experiment (``readlink -f c``: what real tar and the kernel make of it)."""
    root = tmp_path / "workspace"
    root.mkdir()
    (tmp_path / "archive.tar").write_bytes(raw_tar(*CHAIN))
    subprocess.run(["tar", "-xf", str(tmp_path / "archive.tar"), "-C", str(root)], check=True)
    assert os.path.realpath(root / "c") == str(tmp_path)  # out of the tree
    with pytest.raises(InvalidInput) as err:
        check(gz(raw_tar(*CHAIN)))
    assert err.value.message == (
        "the source archive entry 'c' is a symbolic link to 'a/..', which resolves outside "
        "the experiment through c -> a"
    )
    assert "readlink -f" in err.value.fix and err.value.field == "body"


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        (CHAIN, "'c' is a symbolic link to 'a/..', which resolves outside"),
        # the link that makes c lead out comes after it
        ((d("b"), sym("c", "a/.."), sym("a", "b/..")), "'c' is a symbolic link to 'a/..'"),
        # through a link to a link, and a link in the middle of a path
        (
            (d("deep"), sym("deep/up", ".."), sym("l2", "deep/up"), sym("out", "l2/..")),
            "'out' is a symbolic link to 'l2/..', which resolves outside the experiment "
            "through out -> l2",
        ),
        ((d("x/y"), sym("x/up", "y/../.."), sym("z", "x/up/x/up/..")), "'z'"),
        # loops, to itself or through others
        ((sym("l", "l"),), "'l' is a symbolic link in a loop: l -> l"),
        ((sym("p", "q/f"), sym("q", "p/..")), "in a loop: p -> q -> p"),
        # a link over a path the archive uses as a directory, earlier or later
        ((entry("d/f"), sym("d", "e")), "'d' is a symbolic link where the archive has a directory"),
        ((d("d"), sym("d", "e")), "where the archive has a directory"),
        ((sym("d", "e"), d("d")), "'d' is written over the symbolic link 'd'"),
        ((sym("d", "e"), entry("d")), "written over the symbolic link"),
        ((sym("d", "e"), d("d/sub")), "'d/sub' is written through the symbolic link 'd'"),
        # a hard link to what a link replaced: it would be a copy of the link elsewhere
        ((entry("f"), sym("f", "x"), entry("h", tarfile.LNKTYPE, link="f")), "hard link"),
        ((sym("l", "a" * 4097),), "past the limits"),
    ],
)
def test_links_are_resolved_through_the_archives_other_links(
    entries: tuple[tarfile.TarInfo, ...], words: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        check(gz(raw_tar(*entries)))
    assert words in err.value.message and err.value.fix and err.value.field == "body"


def test_links_through_links_that_stay_inside_are_accepted() -> None:
    check(gz(raw_tar(d("b"), sym("a", "b/.."), sym("c", "a/b"), sym("e", "c/../a"))))
    check(gz(raw_tar(sym("later", "x/y/../f"), d("x/y"), entry("x/f"), sym("x/y/up", ".."))))
    check(gz(raw_tar(entry("f"), sym("f", "g"))))  # a link replacing a file
    chain = [sym(f"l{i}", f"l{i + 1}") for i in range(MAX_LINK_DEPTH)]
    check(gz(raw_tar(*chain, entry(f"l{MAX_LINK_DEPTH}"))))  # the kernel follows 40


def test_resolution_is_bounded_on_hostile_chains() -> None:
    """Too deep a chain is refused with a clear error; a wide web of links that each go
    through the one before is resolved once per link, not once per path through it."""
    too_deep = f"follows more than {MAX_LINK_DEPTH} links to its end"
    chain = [sym(f"l{i}", f"l{i + 1}") for i in range(MAX_LINK_DEPTH + 1)]
    for order in (chain, chain[::-1]):  # the same answer whichever link comes first
        with pytest.raises(InvalidInput, match=too_deep):
            check(gz(raw_tar(*order, entry(f"l{MAX_LINK_DEPTH + 1}"))))
    # every link goes through the previous one twice: 2**n links followed by the kernel,
    # and as many steps if each were walked anew; refused at the sixth, in either order
    web = [sym("w0", "d"), *(sym(f"w{i}", f"w{i - 1}/../w{i - 1}") for i in range(1, 3000))]
    started = time.process_time()
    for order in (web, web[::-1]):
        with pytest.raises(InvalidInput, match=too_deep):
            check(gz(raw_tar(d("d"), *order)))
    wide = [d("d"), *(sym(f"v{i}", "d/" + "/".join(["."] * 1000)) for i in range(900))]
    check(gz(raw_tar(*wide)))
    assert time.process_time() - started < 10
    with pytest.raises(InvalidInput, match=f"more than {MAX_LINK_PARTS} path parts"):
        check(gz(raw_tar(*(sym(f"p{i}", "/".join(["."] * 2000)) for i in range(501)))))
