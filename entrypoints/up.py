"""`tp up`: the whole control plane on embedded defaults, stopped cleanly on exit."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys

from rich.console import Console

from adapters.docker.backend import DockerBackend
from adapters.docker.images import BuildProgress, build_runtime
from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres
from domain.errors import TunePlaneError
from entrypoints import logs, secrets_key
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.containers.setup import SetupContainer
from entrypoints.process import run_server
from entrypoints.server import (
    first_admin,
    prepare_fleet,
    saved_admin_token,
    serve,
)
from entrypoints.settings import Settings
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings
from entrypoints.up_check import refusal
from entrypoints.up_nodes import NodePath, start_node_path

console = Console(stderr=True)


async def _ensure_runtime(settings: Settings) -> None:
    """Build the busybox runtime image if the engine answers and it is missing."""
    backend = DockerBackend(settings.docker_host)
    try:
        try:
            await backend.ping()
        except TunePlaneError as exc:
            logs.say(
                f"warning: local backend unavailable: {exc}\n"
                "  jobs will wait until it answers (`bash deploy/dev/dockerd.sh`)",
                stream=sys.stderr,
                level=logging.WARNING,
            )
            return
        with console.status("checking the busybox runtime image") as status:

            def progress(p: BuildProgress) -> None:
                status.update(f"runtime {p.runtime}: {p.stage} {p.message}")

            await build_runtime(
                settings.docker_host,
                "busybox",
                progress=progress,
                cache_dir=settings.build.image_cache,
            )
    finally:
        await backend.close()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, which stops PostgreSQL


async def _set_up(settings: Settings) -> str | None:
    """On one set-up container: the first admin token (None on a later start), then the
    fleet's defaults and the fleet file."""
    async with started(SetupContainer(settings=settings)) as container:
        ctx = await resolve(container.context)
        token = await first_admin(ctx, settings.state_dir)
        await prepare_fleet(ctx, settings)
        return token


def run_up(settings: Settings) -> int:
    if (refused := refusal(settings)) is not None:
        return refused
    if "default_backend" not in settings.explicit:  # members run through the local daemon
        settings = dataclasses.replace(settings, default_backend="node")
    nodes: NodePath | None = None
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # uvicorn swaps in its own while serving
    pg: EmbeddedPostgres | None = None
    try:
        if not settings.database_url:
            with console.status("starting the private PostgreSQL"):
                pg = EmbeddedPostgres(
                    settings.state_dir / "postgres",
                    settings.postgres.port,
                    bin_dir=settings.postgres.bin_dir,
                    run_as=settings.postgres.user,
                )
                settings = dataclasses.replace(settings, database_url=pg.start())
        assert settings.database_url
        with console.status("migrating the database"):
            migrate.upgrade(settings.database_url)
        # the key webhook secrets are sealed under: made 0600 in the state dir at the first start
        asyncio.run(secrets_key.ensure_key_file(settings, embedded=True))
        if load_one(NodeSettings, "executor") != "process":  # host processes run no image
            asyncio.run(_ensure_runtime(settings))
        token = asyncio.run(_set_up(settings))
        with console.status("starting the node gateway and the local node daemon"):
            nodes = start_node_path(settings)
        lines = [f"TunePlane control plane: {settings.url}  (state: {settings.state_dir})"]
        lines.append(f"web console: {settings.url}/console/  (sign in with the admin token)")
        lines += nodes.lines
        if token:
            lines += [
                f"admin token (shown once; a 0600 copy is in {settings.state_dir}/admin-token):",
                f"  {token}",
                f"log in with:  tp login --server {settings.url} --token {token}",
            ]
        else:
            saved = saved_admin_token(settings.state_dir)
            hint = (
                f"tp login --server {settings.url} --token {saved}"
                if saved
                else ("use the admin token printed at the first start")
            )
            lines.append(f"log in with:  {hint}")
        lines.append("Ctrl-C stops it.")
        with contextlib.suppress(KeyboardInterrupt):
            run_server(serve(settings, announce="\n".join(lines), bootstrap=False))
        return 0
    except TunePlaneError as exc:
        logs.report(exc, stream=sys.stderr)
        return 1
    finally:
        if nodes is not None:
            nodes.stop()
        if pg is not None:
            pg.stop()
