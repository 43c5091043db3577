"""Root file systems for the local runtimes, as tar files the engine can import.

* busybox: Debian's static busybox plus one symlink per applet (``busybox --list-full``), written
  straight into a tar (no root needed).
* debootstrap: ``debootstrap --variant=minbase --include=...`` into a scratch directory (root),
  tidied and tarred with GNU tar. The Debian mirror is the one apt already uses here.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from adapters.docker import pip_layer
from adapters.docker.runtimes import Recipe

Say = Callable[[str], None]
MTIME = 1_700_000_000  # fixed, so the busybox tar is reproducible
_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"


class RootfsError(Exception):
    """A root file system cannot be made here; the message says what to install or set."""


# -- busybox -------------------------------------------------------------------------------------


def is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a program interpreter (statically linked)."""
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
            return False
        order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
        phoff = int.from_bytes(head[32:40], order)
        phentsize = int.from_bytes(head[54:56], order)
        phnum = int.from_bytes(head[56:58], order)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = (int.from_bytes(table[i : i + 4], order) for i in range(0, len(table), phentsize))
    return 3 not in types  # PT_INTERP


def find_busybox() -> Path:
    for candidate in (shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"):
        if candidate and Path(candidate).is_file() and is_static_elf(Path(candidate)):
            return Path(candidate)
    raise RootfsError(
        "no statically linked busybox found (Debian package busybox-static)",
    )


def busybox_rootfs(out: Path, say: Say) -> None:
    binary = find_busybox()
    listed = subprocess.run(
        [str(binary), "--list-full"], check=True, capture_output=True, text=True
    ).stdout.split()
    links = sorted({p for p in listed if "/" in p and p != "bin/busybox"})
    say(f"{binary}: {len(links)} applets")
    dirs = {"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "var", "home"}
    dirs |= {"proc", "sys", "dev", "workspace"}
    dirs |= {str(Path(p).parent) for p in links}
    tmp = out.with_suffix(".partial")
    with tarfile.open(tmp, "w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = kind, mode, MTIME
            info.size, info.linkname = len(data), target
            tar.addfile(info, io.BytesIO(data) if data else None)

        for d in sorted(dirs):
            add(d, tarfile.DIRTYPE, 0o700 if d == "root" else 0o755)
        for d in ("tmp", "var/tmp"):
            add(d, tarfile.DIRTYPE, 0o1777)
        add("bin/busybox", tarfile.REGTYPE, 0o755, binary.read_bytes())
        for link in links:
            add(link, tarfile.SYMTYPE, 0o777, target="/bin/busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, _PASSWD.encode())
        add("etc/group", tarfile.REGTYPE, 0o644, _GROUP.encode())
    tmp.replace(out)


# -- debootstrap ---------------------------------------------------------------------------------


def _one_line_sources(text: str) -> list[tuple[str, list[str]]]:
    found = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()  # drop [options]
        if len(words) >= 3 and words[0] == "deb":
            found.append((words[1], [words[2]]))
    return found


def _deb822_sources(text: str) -> list[tuple[str, list[str]]]:
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            found.append((uri, fields.get("suites", "").split()))
    return found


def apt_mirror(suite: str, etc: Path = Path("/etc/apt"), override: str | None = None) -> str:
    """The mirror apt uses for ``suite`` here (``override``, ``TUNEPLANE_DEBIAN_MIRROR``, wins)."""
    if override:
        return override
    entries: list[tuple[str, list[str]]] = []
    files = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        if path.suffix == ".sources":
            entries += _deb822_sources(path.read_text(errors="replace"))
        elif path.name == "sources.list" or path.suffix == ".list":
            entries += _one_line_sources(path.read_text(errors="replace"))
    for uri, suites in entries:
        if suite in suites:
            return uri
    raise RootfsError(
        f"apt's sources ({etc}) name no mirror for Debian {suite}; "
        "set TUNEPLANE_DEBIAN_MIRROR to a Debian mirror URL"
    )


def debootstrap_rootfs(
    out: Path, recipe: Recipe, say: Say, lock: Path | None = None, mirror: str | None = None
) -> None:
    """debootstrap ``recipe`` (and install the pip ``lock`` into it), tidy, tar to ``out``."""
    if os.geteuid() != 0:
        raise RootfsError("debootstrap needs root: run the build as root")
    tool = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if Path(p).exists()), None
    )
    if tool is None:
        raise RootfsError("debootstrap is not installed (apt-get install debootstrap)")
    mirror = apt_mirror(recipe.suite, override=mirror)
    work = out.parent / f"{out.stem}.work"
    if work.exists():
        shutil.rmtree(work)
    cmd = [tool, "--variant=minbase", f"--include={','.join(recipe.include)}"]
    cmd += [recipe.suite, str(work), mirror]
    say(" ".join(cmd))
    try:
        _stream(cmd, say)
        if lock is not None:
            pip_layer.install(work, lock, say)
        _tidy(work)
        say(f"tar {work} -> {out.name}")
        reproducible_tar(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def reproducible_tar(tree: Path, out: Path) -> None:
    """Tar ``tree`` so that the same files give the same bytes: names sorted, one fixed
    mtime, numeric owners, no access or change times (GNU format); the directories an engine
    mounts over (dev, proc, sys, run) and tmp kept empty."""
    tmp = out.with_suffix(".partial")
    excludes = [f"--exclude=./{d}/*" for d in ("dev", "proc", "sys", "tmp", "run")]
    subprocess.run(
        ["tar", "--sort=name", f"--mtime=@{MTIME}", "--numeric-owner", "--format=gnu",
         "-C", str(tree), "-cf", str(tmp), *excludes, "."],
        check=True,
    )  # fmt: skip
    tmp.replace(out)


def _stream(cmd: list[str], say: Say) -> None:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-19:], line]
        say(line)
    if proc.wait() != 0:
        raise RootfsError(f"{cmd[0]} failed ({proc.returncode}):\n" + "\n".join(tail))


def _tidy(root: Path) -> None:
    """Make the tree a container image (`python`, /workspace, no package caches) and drop what
    differs between two runs of the same debootstrap: logs, backup copies, caches of the
    moment, and the day of the build in /etc/shadow."""
    python = root / "usr/bin/python"
    if (root / "usr/bin/python3").exists() and not python.exists():
        python.symlink_to("python3")
    (root / "workspace").mkdir(mode=0o755, exist_ok=True)
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/**/*",
                    "var/cache/apt/*.bin", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
                    "var/cache/ldconfig/aux-cache", "etc/*-", "root/.cache/**/*"):  # fmt: skip
        for path in root.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    shadow = root / "etc/shadow"
    if shadow.is_file():  # field 3: days since 1970 of the last password change
        lines = [_fixed_day(line) for line in shadow.read_text().splitlines()]
        shadow.write_text("".join(line + "\n" for line in lines))
    (root / "tmp").chmod(0o1777)


def _fixed_day(line: str) -> str:
    fields = line.split(":")
    if len(fields) > 2 and fields[2].isdigit():
        fields[2] = str(MTIME // 86400)
    return ":".join(fields)
