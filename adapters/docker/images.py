"""Building the local runtime images without a registry.

A runtime's root file system is made locally (``adapters.docker.rootfs``), cached as a tar under
the cache dir, and loaded through the Engine API as a ``docker save`` archive with a config of
our own (``POST /images/load``, image_archive.py: the same inputs give the same image id) under
the runtime's image name. Building is idempotent: an existing image is kept unless ``force``.

    python -m entrypoints.images_cli build busybox|python [--docker-host H] [--force]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fcntl
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import aiohttp

from adapters.container_engine.api import EngineApi
from adapters.container_engine.engine import EngineError, resolve_host
from adapters.docker import image_archive, pip_layer, rootfs
from adapters.docker.runtimes import LOCAL_RUNTIMES, RECIPES, Recipe
from domain.canonical import digest as content_digest
from domain.catalog import RuntimeSpec
from domain.errors import InvalidInput, TunePlaneError, Unavailable

IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REBUILD = "the cached root file system may be damaged: `tp runtime build {} --force`"
_LONG = aiohttp.ClientTimeout(total=None, sock_read=600, sock_connect=10)


@dataclass(frozen=True, slots=True)
class BuildProgress:
    """One progress report. Stages: check, exists, rootfs, cached, import, done.

    During ``import``, ``done``/``total`` count bytes sent to the engine.
    """

    runtime: str
    stage: str
    message: str = ""
    done: int = 0
    total: int | None = None


Progress = Callable[[BuildProgress], None]


class BuildFailed(TunePlaneError):
    """A runtime image could not be built here; ``fix`` says what to install or set."""

    code = "runtime-build-failed"


def default_cache_dir() -> Path:
    """``~/.cache/tuneplane/images``; the settings (``TUNEPLANE_IMAGE_CACHE``,
    ``XDG_CACHE_HOME``) give callers another."""
    return Path.home() / ".cache" / "tuneplane" / "images"


def _runtime(name: str) -> tuple[RuntimeSpec, Recipe]:
    for spec in LOCAL_RUNTIMES:
        if spec.name == name:
            return spec, RECIPES[name]
    known = ", ".join(r.name for r in LOCAL_RUNTIMES)
    raise InvalidInput(
        f"no local recipe for runtime {name!r}", fix=f"build one of: {known}", field="runtime"
    )


async def build_runtime(
    docker_host: str | None,
    name: str,
    progress: Progress | None = None,
    *,
    force: bool = False,
    cache_dir: Path | None = None,
    mirror: str | None = None,
) -> str:
    """Make runtime ``name``'s image in the engine at ``docker_host``; return its id (sha256:…).

    Raises InvalidInput (unknown name), Unavailable (engine unreachable), BuildFailed.
    """
    spec, recipe = _runtime(name)
    host = resolve_host(docker_host)
    report = progress or (lambda p: None)
    docker = EngineApi(host)
    try:
        report(BuildProgress(name, "check", f"looking for {spec.image} at {host}"))
        existing, made_from = await _image_inputs(docker, host, spec.image)
        if existing and made_from not in (None, inputs_key(name, recipe)):
            # built from an older recipe or lock (its label says so): made again
            report(BuildProgress(name, "check", f"{spec.image} is from an older recipe"))
        elif existing and not force:
            report(BuildProgress(name, "exists", f"{spec.image} is already built ({existing})"))
            return existing
        tar, size = await _rootfs(
            name, recipe, cache_dir or default_cache_dir(), force, report, mirror
        )
        expected = await _load(docker, host, spec, recipe, tar, size, report)
        image_id = await _image_id(docker, host, spec.image)
        if image_id != expected:
            raise BuildFailed(
                f"the engine loaded {tar}, but {spec.image} is {image_id}, not {expected}"
            )
        report(BuildProgress(name, "done", f"{spec.image} {image_id}"))
        return image_id
    finally:
        await docker.close()


async def _image_inputs(docker: EngineApi, host: str, image: str) -> tuple[str | None, str | None]:
    """The image's id and the ``tuneplane.inputs`` label it was built with (None: absent, or
    an image made another way, which is left as it is)."""
    try:
        info = await docker.json(f"images/{image}/json")
    except EngineError as exc:
        if exc.status == 404:
            return None, None
        raise Unavailable(f"cannot inspect {image}: {exc.message}") from None
    labels = (info.get("Config") or {}).get("Labels") or {}
    made_from = labels.get("tuneplane.inputs")
    return str(info["Id"]), (str(made_from) if made_from is not None else None)


async def _image_id(docker: EngineApi, host: str, image: str) -> str | None:
    try:
        info = await docker.json(f"images/{image}/json")
    except EngineError as exc:
        if exc.status == 404:
            return None
        raise Unavailable(f"cannot inspect {image}: {exc.message}") from None
    return str(info["Id"])


async def _rootfs(
    name: str, recipe: Recipe, cache: Path, force: bool, report: Progress, mirror: str | None
) -> tuple[Path, int]:
    """The cached root file system tar (made first if absent or ``force``) and its size."""
    loop = asyncio.get_running_loop()

    def say(stage: str, line: str, size: int = 0) -> None:
        loop.call_soon_threadsafe(report, BuildProgress(name, stage, line, size))

    lock = pip_layer.lock_path(name) if recipe.pip else None

    def make() -> tuple[Path, int]:
        cache.mkdir(parents=True, exist_ok=True)
        out = cache / rootfs_name(name, recipe)
        # one build of a runtime at a time per cache: a second waits, then finds the tar
        with (cache / f"{name}.lock").open("w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            if out.exists() and not force:
                say("cached", f"root file system {out}", out.stat().st_size)
            elif recipe.kind == "busybox":
                rootfs.busybox_rootfs(out, lambda line: say("rootfs", line))
            else:
                rootfs.debootstrap_rootfs(
                    out, recipe, lambda line: say("rootfs", line), lock, mirror
                )
        return out, out.stat().st_size

    try:
        return await asyncio.to_thread(make)
    except (rootfs.RootfsError, pip_layer.LockError, OSError, subprocess.CalledProcessError) as exc:
        raise BuildFailed(
            f"cannot make the {name} root file system: {exc}",
            fix=f"run `bash deploy/images/build.sh {name}` as root (it installs the tools)",
        ) from None


def inputs_key(name: str, recipe: Recipe) -> str:
    """What a runtime is made from, as 12 hex digits: the recipe and its lock's contents."""
    parts: dict[str, object] = {"name": name, "recipe": dataclasses.asdict(recipe)}
    if recipe.pip:
        parts["lock"] = pip_layer.lock_digest(pip_layer.lock_path(name))
    return content_digest(parts).removeprefix("sha256:")[:12]


def rootfs_name(name: str, recipe: Recipe) -> str:
    """The cached root file system's file name: a new recipe or lock is a new file."""
    return f"{name}-rootfs-{inputs_key(name, recipe)}.tar"


async def _load(
    docker: EngineApi,
    host: str,
    spec: RuntimeSpec,
    recipe: Recipe,
    tar: Path,
    total: int,
    report: Progress,
) -> str:
    """Load the image as a ``docker save`` archive of ``tar`` (image_archive.py); its id."""
    layer = await asyncio.to_thread(image_archive.file_digest, tar)
    labels = {"tuneplane.runtime": spec.name, "tuneplane.recipe": recipe.version,
              "tuneplane.inputs": inputs_key(spec.name, recipe)}  # fmt: skip
    archive = image_archive.image_archive(tar, layer, spec.image, labels, [IMAGE_PATH])

    def sent(done: int) -> None:
        report(BuildProgress(spec.name, "import", spec.image, done, total))

    async def body() -> AsyncIterator[bytes]:
        for chunk in image_archive.chunks(archive, sent):
            yield chunk

    report(BuildProgress(spec.name, "import", spec.image, 0, total))
    try:
        async with docker.request(
            "images/load",
            "POST",
            params={"quiet": "1"},
            data=body(),
            headers={"Content-Type": "application/x-tar"},
            client_timeout=_LONG,
        ) as resp:
            text = (await resp.read()).decode(errors="replace")
    except EngineError as exc:
        raise BuildFailed(
            f"the engine refused to load {tar}: {exc.message}", fix=_REBUILD.format(spec.name)
        ) from None
    for line in text.splitlines():
        msg = json.loads(line) if line.strip().startswith("{") else {}
        if msg.get("error"):
            raise BuildFailed(
                f"the engine failed to load {tar}: {msg['error']}", fix=_REBUILD.format(spec.name)
            )
    return archive.image_id


def _printer(stream: TextIO = sys.stderr) -> Progress:
    last = {"pct": -1}

    def show(p: BuildProgress) -> None:
        if p.stage == "import" and p.total:
            pct = p.done * 100 // p.total
            if pct // 10 == last["pct"] // 10 and pct != 100:
                return
            last["pct"] = pct
            line = f"[{p.runtime}] import {p.done / 1e6:.1f}/{p.total / 1e6:.1f} MB ({pct}%)"
        else:
            line = f"[{p.runtime}] {p.stage}: {p.message}"
        print(line, file=stream, flush=True)

    return show


def main(
    argv: list[str] | None = None,
    *,
    docker_host: str | None = None,
    cache_dir: Path | None = None,
    mirror: str | None = None,
) -> int:
    """The build CLI (``python -m entrypoints.images_cli``, which gives the settings)."""
    parser = argparse.ArgumentParser(prog="python -m entrypoints.images_cli")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a local runtime image")
    build.add_argument("runtime", choices=[r.name for r in LOCAL_RUNTIMES])
    build.add_argument("--docker-host", default=docker_host, help="default: $DOCKER_HOST")
    build.add_argument("--force", action="store_true", help="rebuild even if it exists")
    build.add_argument("--cache-dir", type=Path, default=cache_dir)
    args = parser.parse_args(argv)
    try:
        image_id = asyncio.run(
            build_runtime(
                args.docker_host, args.runtime, _printer(), force=args.force,
                cache_dir=args.cache_dir, mirror=mirror,
            )
        )  # fmt: skip
    except TunePlaneError as exc:
        print(f"error: {exc.message}" + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        return 1
    print(image_id)
    return 0
