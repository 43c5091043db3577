"""Source archives for tests: what `tp submit` uploads (a gzip-compressed tar), built in memory,
the same bytes for the same files."""

from __future__ import annotations

import gzip
import io
import tarfile


def tar_gz(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    """A .tar.gz of ``files`` (path → content) and symbolic ``links`` (path → target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return gzip.compress(buf.getvalue(), mtime=0)


def member_bytes(tar: tarfile.TarFile, member: str | tarfile.TarInfo) -> bytes:
    """The content of a regular file in ``tar`` (AssertionError for a link or directory)."""
    f = tar.extractfile(member)
    assert f is not None, f"{member} is not a regular file"
    return f.read()
