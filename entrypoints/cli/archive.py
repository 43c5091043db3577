"""Pack an experiment directory into a deterministic source archive (gzip-compressed tar).

The file set is git's view of the directory: tracked plus untracked-not-ignored files, minus
tracked files deleted from the work tree. Paths in the archive are relative to the experiment
directory. Entries are sorted and carry mtime 0, uid/gid 0 and normalised modes, and the gzip
header has no name and mtime 0, so the same tree always gives the same bytes and digest.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from domain.errors import InvalidInput, TooLarge

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024  # the server's upload limit is the same

SECRET_PATTERNS = (
    ".env", ".env.*", "*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ed25519*", "id_ecdsa*",
    "*.p12", "*.pfx", ".netrc", "_netrc", "credentials.json", ".npmrc", ".pypirc", "*.kdbx",
    ".git-credentials", "*.jks", "*.keystore", ".htpasswd",
)  # fmt: skip
NOT_SECRET = (".env.example", ".env.sample", ".env.template", "*.pub")

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Archive:
    path: Path  # a temporary file; the caller removes it (``discard``)
    digest: str  # "sha256:<hex>" of the compressed bytes
    size: int
    files: tuple[str, ...]
    skipped: tuple[str, ...] = field(default=())  # e.g. submodules

    def chunks(self, on_chunk: Progress | None = None, size: int = 1 << 16) -> Iterator[bytes]:
        with self.path.open("rb") as f:
            while chunk := f.read(size):
                if on_chunk:
                    on_chunk(len(chunk))
                yield chunk

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def _git(cwd: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False, timeout=60)
    except FileNotFoundError:
        raise InvalidInput(
            "git is not installed", fix="install git: the source archive is packed from git's view"
        ) from None
    if done.returncode != 0:
        raise InvalidInput(
            f"{cwd} is not inside a git repository",
            fix="run `tp init <workspace-dir>` (it runs `git init`), then create experiments "
            "inside the workspace with `tp new`",
            field=str(cwd),
        )
    return done.stdout


def list_files(exp_dir: Path) -> list[str]:
    """Paths (relative to ``exp_dir``, sorted) that git sees there and that exist on disk."""
    exp_dir = exp_dir.resolve()
    if not exp_dir.is_dir():
        raise InvalidInput(f"{exp_dir} is not a directory", fix="name an experiment directory")
    _git(exp_dir, "rev-parse", "--show-toplevel")
    raw = _git(exp_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
    names = {os.fsdecode(p) for p in raw.split(b"\0") if p}
    return sorted(n for n in names if os.path.lexists(exp_dir / n))


def is_secret(rel: str) -> bool:
    """Whether the file's name looks like a secret, in any case (``.ENV``, ``key.PEM``: a
    case-insensitive file system, or a name typed in capitals, holds the same secret)."""
    base = rel.rsplit("/", 1)[-1].casefold()
    if any(fnmatch.fnmatchcase(base, p) for p in NOT_SECRET):
        return False
    return any(fnmatch.fnmatchcase(base, p) for p in SECRET_PATTERNS)


def check_secrets(files: list[str], allow: bool) -> None:
    found = [f for f in files if is_secret(f)]
    if found and not allow:
        raise InvalidInput(
            "refusing to pack files that look like secrets: " + ", ".join(found),
            fix="remove them or add them to .gitignore; if they hold no secret, pass "
            "--allow-secret-files",
            field="source",
        )


def check_symlink(exp_dir: Path, rel: str) -> None:
    """Refuse a link that is absolute or resolves outside the experiment directory."""
    target = os.readlink(exp_dir / rel)
    lexical = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    real = os.path.realpath(exp_dir / rel)
    root = os.path.realpath(exp_dir)
    inside = real == root or real.startswith(root + os.sep)
    if os.path.isabs(target) or lexical.split(os.sep)[0] == ".." or not inside:
        raise InvalidInput(
            f"symlink {rel} points outside the experiment directory ({target})",
            fix="copy the file into the experiment directory, or make the link relative to a "
            "file inside it",
            field="source",
        )


def _tarinfo(rel: str, st: os.stat_result, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(rel)
    info.type = kind
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o777 if kind == tarfile.SYMTYPE else (0o755 if st.st_mode & 0o111 else 0o644)
    info.linkname = linkname
    info.size = st.st_size if kind == tarfile.REGTYPE else 0
    return info


class _Hashing:
    """A write-only file that hashes and counts what passes through it, then writes it on."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def _too_large(size: int, limit: int, exp_dir: Path, files: list[str], final: bool) -> TooLarge:
    sizes = sorted(((exp_dir / f).lstat().st_size, f) for f in files)[-5:]
    biggest = ", ".join(f"{f} ({n / 2**20:.1f} MiB)" for n, f in reversed(sizes))
    amount = f"{size / 2**20:.1f} MiB" if final else f"over {size / 2**20:.1f} MiB"
    return TooLarge(
        f"source archive of {exp_dir.name} is {amount} compressed, above the limit of "
        f"{limit / 2**20:.0f} MiB (largest files: {biggest})",
        fix="keep data sets and checkpoints out of the source: add them to .gitignore or move "
        "them to storage",
        field="source",
    )


def pack(
    exp_dir: Path,
    *,
    allow_secret_files: bool = False,
    limit: int = MAX_ARCHIVE_BYTES,
    on_progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
) -> Archive:
    """Pack ``exp_dir`` into a temporary archive file; refuse secrets, escapes and oversize."""
    exp_dir = exp_dir.resolve()
    names = list_files(exp_dir)
    check_secrets(names, allow_secret_files)
    entries: list[tuple[str, os.stat_result]] = []
    skipped: list[str] = []
    for rel in names:
        st = (exp_dir / rel).lstat()
        if stat.S_ISLNK(st.st_mode):
            check_symlink(exp_dir, rel)
        elif not stat.S_ISREG(st.st_mode):
            skipped.append(rel)  # a submodule (gitlink directory) or a special file
            continue
        entries.append((rel, st))
    if on_total:
        on_total(sum(st.st_size for _, st in entries if stat.S_ISREG(st.st_mode)))
    fd, tmp = tempfile.mkstemp(prefix="tuneplane-src-", suffix=".tar.gz")
    path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = _Hashing(raw)
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for rel, st in entries:
                    if stat.S_ISLNK(st.st_mode):
                        link = os.readlink(exp_dir / rel)
                        tar.addfile(_tarinfo(rel, st, tarfile.SYMTYPE, link))
                        continue
                    with (exp_dir / rel).open("rb") as f:
                        tar.addfile(_tarinfo(rel, st, tarfile.REGTYPE), f)
                    if on_progress:
                        on_progress(st.st_size)
                    if sink.size > limit:
                        raise _too_large(sink.size, limit, exp_dir, names, final=False)
        if sink.size > limit:
            raise _too_large(sink.size, limit, exp_dir, names, final=True)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Archive(
        path=path,
        digest="sha256:" + sink.sha.hexdigest(),
        size=sink.size,
        files=tuple(rel for rel, _ in entries),
        skipped=tuple(skipped),
    )
