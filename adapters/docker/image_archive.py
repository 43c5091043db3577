"""A runtime image as a ``docker save`` archive, made from one root file system tar, so that the
image id is a function of the inputs alone.

An engine's image id is the sha256 of the image's config JSON. ``POST /images/create?fromSrc``
writes the time of the import into that config, so every import is a new id; this archive
carries a config of our own instead (a fixed ``created``, the layer's digest, the labels), and
``POST /images/load`` keeps it: the same root file system tar and labels give the same id on any
engine (Docker's and Podman's loaders both read this format). Pure but for reading the tar.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

CREATED = "2023-11-14T22:13:20Z"  # rootfs.MTIME, as RFC 3339
CHUNK = 1 << 20
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True, slots=True)
class ImageArchive:
    """The archive's parts: the layer (a tar on disk, with its sha256) and the JSON files."""

    layer: Path
    layer_digest: str  # sha256:… of the layer tar, the image's only diff_id
    config: bytes
    manifest: bytes

    @property
    def image_id(self) -> str:
        """What the engine will call the image: the sha256 of its config."""
        return "sha256:" + hashlib.sha256(self.config).hexdigest()


def file_digest(path: Path) -> str:
    """sha256:… of a file, kept beside it (``<file>.sha256``) while the file is unchanged."""
    side = path.with_name(path.name + ".sha256")
    stat = path.stat()
    stamp = f"{stat.st_size} {stat.st_mtime_ns}"
    if side.is_file():
        known_stamp, _, known = side.read_text().partition("\n")
        if known_stamp == stamp and re.fullmatch(r"sha256:[0-9a-f]{64}\n", known):
            return known.strip()
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = "sha256:" + h.hexdigest()
    partial = side.with_name(side.name + ".partial")
    partial.write_text(f"{stamp}\n{digest}\n")
    partial.replace(side)
    return digest


def image_archive(
    layer: Path, layer_digest: str, tag: str, labels: dict[str, str], env: list[str]
) -> ImageArchive:
    config = {
        "architecture": _ARCH.get(platform.machine(), platform.machine()),
        "os": "linux",
        "created": CREATED,
        "config": {
            "Env": env,
            "Cmd": ["/bin/sh"],
            "WorkingDir": "/workspace",
            "Labels": dict(sorted(labels.items())),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": CREATED, "created_by": "tuneplane runtime build"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [_layer_name(layer_digest)]}]
    return ImageArchive(layer, layer_digest, config_bytes, json.dumps(manifest).encode())


def _layer_name(layer_digest: str) -> str:
    return layer_digest.removeprefix("sha256:") + "/layer.tar"


def _header(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime = size, kind, 1_700_000_000
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def chunks(archive: ImageArchive, sent: Callable[[int], None] = lambda n: None) -> Iterator[bytes]:
    """The archive as a stream (the layer is read from disk, never held in memory);
    ``sent(n)`` after each chunk of the layer, with the layer's bytes so far."""
    config_name = json.loads(archive.manifest)[0]["Config"]
    size = archive.layer.stat().st_size
    yield _header(archive.layer_digest.removeprefix("sha256:") + "/", kind=tarfile.DIRTYPE)
    yield _header(_layer_name(archive.layer_digest), size)
    done = 0
    with archive.layer.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
            done += len(chunk)
            sent(done)
    yield b"\0" * (-size % 512)
    for name, data in ((config_name, archive.config), ("manifest.json", archive.manifest)):
        yield _header(name, len(data)) + data + b"\0" * (-len(data) % 512)
    yield b"\0" * 1024
