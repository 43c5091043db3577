"""Deterministic tar archives of in-memory files, and their checked unpacking.

``pack`` writes a PAX tar whose bytes depend only on the files: entries sorted by path, a
directory entry for every parent, mtime 0, uid/gid 0 and no owner names, mode 0755 for
``*.sh`` and 0644 otherwise. The Job Capsule (``domain.capsule``) and plugin packages
(``domain.plugins``) are written with it.

``unpack`` reads a tar (plain or gzip-compressed) back into ``{path: bytes}``, refusing, with
an error that names the entry, anything but regular files and directories, paths that are
absolute or climb out (``..``), duplicate paths, and more files or bytes than allowed.
"""

from __future__ import annotations

import gzip
import io
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Mapping

from domain.errors import InvalidInput, TooLarge

MAX_PATH = 255


def default_mode(name: str) -> int:
    return 0o755 if name.endswith(".sh") else 0o644


def pack(
    files: Mapping[str, bytes], prefix: str = "", mode: Callable[[str], int] = default_mode
) -> bytes:
    """A tar of ``files`` (relative ``/``-separated paths), each under ``prefix`` (``a/b``:
    entries ``a``, ``a/b`` and ``a/b/<path>``; ``""``: at the top)."""
    base = [p for p in prefix.split("/") if p]
    dirs = {"/".join(base[: i + 1]) for i in range(len(base))}
    for name in files:
        parts = [*base, *name.split("/")[:-1]]
        dirs |= {"/".join(parts[: i + 1]) for i in range(len(parts))}
    top = "/".join(base) + "/" if base else ""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs):
            tar.addfile(_info(name, 0, tarfile.DIRTYPE, 0o755))
        for name, data in sorted(files.items()):
            tar.addfile(_info(top + name, len(data), tarfile.REGTYPE, mode(name)), io.BytesIO(data))
    return out.getvalue()


def _info(name: str, size: int, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode, info.mtime = size, kind, mode, 0
    return info


def check_path(path: str, field: str) -> str:
    """``path`` normalised (a leading ``./`` dropped); InvalidInput unless it is a relative,
    ``/``-separated path without ``..``, empty parts, backslashes or control characters."""
    name = path.removeprefix("./")
    parts = name.split("/")
    bad = (
        not name
        or len(name) > MAX_PATH
        or name.startswith("/")
        or "\\" in name
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    )
    if bad:
        raise InvalidInput(
            f"{path!r} is not an allowed file path in a package",
            fix="use relative paths without '..', '.', empty parts, backslashes or control "
            f"characters, at most {MAX_PATH} characters",
            field=field,
        )
    return name


def unpack(data: bytes, *, max_files: int, max_bytes: int, what: str) -> dict[str, bytes]:
    """The regular files of the tar ``data`` by path (directories are implied by paths)."""
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for entry in tar:
                if entry.isdir():
                    continue
                name = check_path(entry.name, what)
                if not entry.isreg():
                    raise InvalidInput(
                        f"{what} holds {name!r}, which is not a regular file "
                        "(links and special files are not allowed)",
                        fix="replace links by copies of the files they point to",
                        field=what,
                    )
                if name in files:
                    raise InvalidInput(f"{what} holds {name!r} twice",
                                       fix="pack each file once", field=what)  # fmt: skip
                total += entry.size
                if len(files) >= max_files or total > max_bytes:
                    raise TooLarge(
                        f"{what} holds more than {max_files} files or {max_bytes} bytes",
                        fix="leave data sets, checkpoints and caches out of the package",
                        field=what,
                    )
                extracted = tar.extractfile(entry)
                assert extracted is not None  # a regular file
                files[name] = extracted.read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InvalidInput(
            f"{what} is not a readable tar archive ({exc})",
            fix="send a tar or a gzip-compressed tar (`tp plugin publish DIR` packs one)",
            field=what,
        ) from None
    return files


MAX_SOURCE_ENTRIES = 100_000
MAX_SOURCE_PATH = 4096


def check_source(
    data: bytes, *, max_unpacked: int, field: str, max_entries: int = MAX_SOURCE_ENTRIES
) -> None:
    """Refuse (InvalidInput, naming the entry) a source archive the capsule runner could not
    unpack safely into ``/workspace``: anything but a tar, gzip-compressed or plain; an entry
    that is absolute, climbs out (``..``), holds a control character, is too long, or is written
    through a symbolic link; a symbolic link whose target is absolute or leaves the tree; a hard
    link to anything but an earlier file; a device, FIFO or other special file; more than
    ``max_entries`` entries or ``max_unpacked`` bytes unpacked (TooLarge), which is found from
    the entries' headers, before their data is decompressed."""
    if not data:
        raise InvalidInput(
            "the source archive is empty",
            fix="upload a .tar.gz of the experiment directory (`tp submit` packs one)",
            field=field,
        )
    raw: io.BytesIO | gzip.GzipFile = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":  # decompressed as the entries are read
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    files: set[str] = set()
    links: set[str] = set()
    total = 0
    try:
        with tarfile.open(fileobj=raw, mode="r|") as tar:
            for count, entry in enumerate(tar, 1):
                name = _source_path(entry.name, field)
                if count > max_entries or total + entry.size > max_unpacked:
                    raise TooLarge(
                        f"the source archive unpacks to more than {max_entries} entries "
                        f"or {max_unpacked} bytes",
                        fix="leave data sets, checkpoints and caches out of the source "
                        "(.gitignore them)",
                        field=field,
                    )
                _check_entry(entry, name, files, links, field)
                if entry.isreg():
                    total += entry.size
                    files.add(name)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InvalidInput(
            f"the source archive is not a readable gzip-compressed tar ({exc})",
            fix="upload a .tar.gz of the experiment directory (`tp submit` packs one)",
            field=field,
        ) from None


def _source_path(path: str, field: str) -> str:
    name = path.removeprefix("./").rstrip("/")
    parts = name.split("/")
    bad = (
        not name
        or len(name) > MAX_SOURCE_PATH
        or name.startswith("/")
        or any(p == ".." or len(p) > 255 for p in parts)
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    )
    if bad:
        raise InvalidInput(
            f"the source archive holds an unsafe path {path!r}",
            fix="pack relative paths inside the experiment directory, without '..' or control "
            "characters (`tp submit` packs one)",
            field=field,
        )
    return name


def _check_entry(
    entry: tarfile.TarInfo, name: str, files: set[str], links: set[str], field: str
) -> None:
    """No entry is written through a link, so a link (whose target is checked lexically) can
    only point, never redirect a write: the runner unpacks with plain ``tar`` (on Slurm, as
    the user on the node itself)."""
    parts = name.split("/")
    through = next(("/".join(parts[:i]) for i in range(1, len(parts))
                    if "/".join(parts[:i]) in links), None)  # fmt: skip
    problem = None
    if through is not None:
        problem = f"is written through the symbolic link {through!r}"
    elif entry.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(name), entry.linkname))
        if entry.linkname.startswith("/") or target == ".." or target.startswith("../"):
            problem = f"is a symbolic link to {entry.linkname!r}, outside the experiment"
        links.add(name)
    elif entry.islnk():
        if entry.linkname.removeprefix("./") not in files:
            problem = f"is a hard link to {entry.linkname!r}, which is not an earlier file"
    elif not (entry.isreg() or entry.isdir()):
        problem = "is a device, FIFO or other special file"
    if problem:
        raise InvalidInput(
            f"the source archive entry {name!r} {problem}",
            fix="pack only files, directories and relative links inside the experiment "
            "(`tp submit` packs one)",
            field=field,
        )
