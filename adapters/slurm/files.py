"""Files of an attempt's directory on the shared file system, as the Slurm backend writes and
reads them."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Whole or not at all: written beside, then renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)


def read_from(path: Path, offset: int) -> bytes:
    """What the file holds from ``offset`` on; nothing when it is not there (yet)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""
