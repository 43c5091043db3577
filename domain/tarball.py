"""Deterministic tar archives of in-memory files, and their checked unpacking.

``pack`` writes a PAX tar whose bytes depend only on the files: entries sorted by path, a
directory entry for every parent, mtime 0, uid/gid 0 and no owner names, mode 0755 for
``*.sh`` and 0644 otherwise. The Job Capsule (``domain.capsule``) and plugin packages
(``domain.plugins``) are written with it.

``unpack`` reads a tar (plain or gzip-compressed) back into ``{path: bytes}``, refusing, with
an error that names the entry, anything but regular files and directories, paths that are
absolute or climb out (``..``), duplicate paths, and more files or bytes than allowed.

``check_source`` checks an uploaded source archive without unpacking it: its symbolic links are
resolved through one another (``_Tree``), so no chain of links leads out of the tree.
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
MAX_LINK_DEPTH = 40  # links followed through links, as Linux's ELOOP limit
MAX_LINK_PARTS = 1_000_000  # path parts in every link's target together: bounds the resolution


def check_source(
    data: bytes, *, max_unpacked: int, field: str, max_entries: int = MAX_SOURCE_ENTRIES
) -> None:
    """Refuse (InvalidInput, naming the entry) a source archive the capsule runner could not
    unpack safely into ``/workspace``: anything but a tar, gzip-compressed or plain; an entry
    that is absolute, climbs out (``..``), holds a control character, is too long, or is written
    through or over a symbolic link; a symbolic link where the archive has a directory, whose
    target is absolute, or that resolves outside the tree through the archive's other links
    (wherever they are in the archive; chains deeper than ``MAX_LINK_DEPTH`` and loops are
    refused too); a hard link to anything but an earlier file; a device, FIFO or other special
    file; more than ``max_entries`` entries or ``max_unpacked`` bytes unpacked (TooLarge), which
    is found from the entries' headers, before their data is decompressed."""
    if not data:
        raise InvalidInput(
            "the source archive is empty",
            fix="upload a .tar.gz of the experiment directory (`tp submit` packs one)",
            field=field,
        )
    raw: io.BytesIO | gzip.GzipFile = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":  # decompressed as the entries are read
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    tree = _Tree(field)
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
                tree.add(entry, name)
                if entry.isreg():
                    total += entry.size
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise InvalidInput(
            f"the source archive is not a readable gzip-compressed tar ({exc})",
            fix="upload a .tar.gz of the experiment directory (`tp submit` packs one)",
            field=field,
        ) from None
    tree.check_links()


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


_ROOT = 0  # the node of the experiment directory (``/workspace``)


class _Tree:
    """What unpacking the archive makes, entry by entry, as far as links go: the files, the
    directories, and the symbolic links with their targets.

    No entry is written through or over a link, and no link replaces a directory, so a link
    can only point, never redirect a write (the runner unpacks with plain ``tar``: on Slurm, as
    the user on the node itself), and every link's parents are real directories. Once the
    whole archive is read, each link is resolved through the others, as the kernel would
    follow them (``check_links``): the paths are nodes interned by (parent, name), so a step
    is O(1), and each link is resolved once; the targets' parts together are bounded
    (``MAX_LINK_PARTS``), and so is the work."""

    def __init__(self, field: str) -> None:
        self._field = field
        self._files: set[str] = set()
        self._dirs: set[str] = set()
        self._links: dict[str, str] = {}  # name → target, in archive order
        self._parts = 0
        self._node: dict[tuple[int, str], int] = {}
        self._parent: list[int] = [_ROOT]  # the root's parent is itself, never used

    def _refuse(self, name: str, problem: str, fix: str = "") -> InvalidInput:
        return InvalidInput(
            f"the source archive entry {name!r} {problem}",
            fix=fix
            or "pack only files, directories and relative links inside the experiment "
            "(`tp submit` packs one)",
            field=self._field,
        )

    def add(self, entry: tarfile.TarInfo, name: str) -> None:
        parts = name.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        through = next((p for p in parents if p in self._links), None)
        if through is not None:
            raise self._refuse(name, f"is written through the symbolic link {through!r}")
        if name in self._links:
            raise self._refuse(name, f"is written over the symbolic link {name!r}")
        self._dirs.update(parents)
        if entry.issym():
            self._add_link(name, entry.linkname)
        elif entry.islnk():
            if entry.linkname.removeprefix("./") not in self._files:
                raise self._refuse(
                    name, f"is a hard link to {entry.linkname!r}, which is not an earlier file"
                )
        elif entry.isdir():
            self._dirs.add(name)
        elif entry.isreg():
            self._files.add(name)
        else:
            raise self._refuse(name, "is a device, FIFO or other special file")

    def _add_link(self, name: str, target: str) -> None:
        lexical = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if target.startswith("/") or lexical == ".." or lexical.startswith("../"):
            raise self._refuse(name, f"is a symbolic link to {target!r}, outside the experiment")
        if name in self._dirs:
            raise self._refuse(
                name, "is a symbolic link where the archive has a directory (entries under it)"
            )
        self._parts += target.count("/") + 1
        if len(target) > MAX_SOURCE_PATH or self._parts > MAX_LINK_PARTS:
            raise self._refuse(
                name,
                f"is a symbolic link past the limits: a target over {MAX_SOURCE_PATH} "
                f"characters, or more than {MAX_LINK_PARTS} path parts in all the targets",
                fix="make the links' targets short relative paths (`tp submit` packs one)",
            )
        self._files.discard(name)  # it replaces an earlier file: no hard link to it after
        self._links[name] = target

    def _child(self, node: int, name: str) -> int:
        found = self._node.get((node, name))
        if found is None:
            found = self._node[(node, name)] = len(self._parent)
            self._parent.append(node)
        return found

    def _path_node(self, path: str) -> int:
        node = _ROOT
        for part in path.split("/"):
            node = self._child(node, part)
        return node

    def check_links(self) -> None:
        """Every link resolved through the others stays inside the tree, following at most
        ``MAX_LINK_DEPTH`` links, as the kernel does (ELOOP past it); else InvalidInput naming
        the first link (in archive order) that does not."""
        links = {self._path_node(name): name for name in self._links}
        resolved: dict[int, tuple[int, int]] = {}
        for node, name in links.items():
            self._resolve(node, links, resolved, [], name)

    def _resolve(
        self,
        node: int,
        links: dict[int, str],
        resolved: dict[int, tuple[int, int]],
        chain: list[str],
        first: str,
    ) -> tuple[int, int]:
        """The node the link ``node`` leads to (never a link) and how many links following it
        takes (itself included), each link resolved once. ``chain``: the links being followed
        to get here, from ``first``'s; each adds at least one to ``first``'s count."""
        done = resolved.get(node)
        if done is not None:
            return done
        name = links[node]
        if name in chain:
            raise self._refuse(
                first,
                "is a symbolic link in a loop: " + " -> ".join([*chain, name]),
                fix="break the loop: point one of these links at a file or directory",
            )
        chain.append(name)
        followed = 1
        if len(chain) > MAX_LINK_DEPTH:
            raise self._too_deep(first)
        via: list[str] = []  # the links this one's target went through, for the error
        here = self._parent[node]  # a real directory: no link has a link among its parents
        for part in self._links[name].split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if here == _ROOT:
                    raise self._refuse(
                        first,
                        f"is a symbolic link to {self._links[first]!r}, which resolves "
                        f"outside the experiment through {' -> '.join([*chain, *via])}",
                        fix="make the link point inside the experiment directory, following "
                        "the archive's other links (`readlink -f` it)",
                    )
                here = self._parent[here]
                continue
            here = self._child(here, part)
            if here in links:
                via.append(links[here])
                here, more = self._resolve(here, links, resolved, chain, first)
                followed += more
            if len(chain) + followed - 1 > MAX_LINK_DEPTH:
                raise self._too_deep(first)
        chain.pop()
        resolved[node] = (here, followed)
        return here, followed

    def _too_deep(self, first: str) -> InvalidInput:
        return self._refuse(
            first,
            f"is a symbolic link that follows more than {MAX_LINK_DEPTH} links to its end "
            "(links through links: the kernel refuses to follow it)",
            fix="point the link at its file or directory directly, not through other links",
        )
