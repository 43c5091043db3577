"""Running the control plane: `tp serve` (one API process) and `tp up` (embedded defaults)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from datetime import timedelta
from pathlib import Path

import uvicorn

from adapters.gpu.nvml import open_probe
from application.auth import bootstrap_admin
from application.context import Context
from application.fleet_config import apply_fleet_config, ensure_defaults
from application.gang import GangSettings
from domain.coordination_ports import LeaderLease
from domain.errors import Conflict
from domain.gpus import one_model
from entrypoints import fleet_config, logs, secrets_key
from entrypoints.api.app import create_app
from entrypoints.api.head import head_as_get
from entrypoints.api.instrumentation import instrumented
from entrypoints.cli.config import write_private
from entrypoints.containers.api import ApiContainer
from entrypoints.containers.database import reach_database
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.containers.setup import SetupContainer
from entrypoints.process import check_listen
from entrypoints.settings import Settings
from entrypoints.settings_loader import SettingExit, load_one
from entrypoints.settings_metrics import MetricsSettings
from entrypoints.settings_sections import NodeSettings

log = logging.getLogger("tuneplane")
ADMIN_TOKEN_FILE = "admin-token"


async def serve(
    settings: Settings, *, supervise: bool = True, announce: str = "", bootstrap: bool = True
) -> None:
    """Serve the HTTP API (and run a supervisor) until interrupted. On an empty database (no
    token yet) the first process to get there creates user admin and its token, written 0600
    to the state directory (``bootstrap``; `tp up` has done so already and prints the token)."""
    check_listen(settings.host, settings.port, "--host/--port or TUNEPLANE_HTTP_HOST/_PORT")
    check_store_groups(settings)
    await reach_database(settings)
    await secrets_key.ensure_key_file(settings)
    async with started(ApiContainer(settings=settings)) as container:
        ctx = await resolve(container.context)
        if ctx.notifications is not None:
            await secrets_key.seal_stored(ctx.notifications)
        if bootstrap and (token := await bootstrap_admin(ctx)) is not None:
            path = _keep_admin_token(settings.state_dir, token)
            if path is not None:
                logs.say(first_start_text(path, token, settings.url, sys.stdout.isatty()))
        await prepare_fleet(ctx, settings)
        lease: LeaderLease | None = None
        if supervise:  # the control loop runs in the one process holding the lease
            lease = await resolve(container.lease)
        gc_every = timedelta(seconds=settings.blob_gc_seconds) if settings.blob_gc_seconds else None
        app = create_app(
            ctx,
            supervise=supervise,
            lease=lease,
            gangs=gang_settings(settings),
            collect_blobs_every=gc_every if supervise else None,
            metrics=str(load_one(MetricsSettings, "api")),
            store_groups=settings.admission_store_groups,
        )
        config = uvicorn.Config(
            # every request counted and timed (docs/operations.md#metrics); HEAD answered as GET
            instrumented(head_as_get(app)),
            host=settings.host,
            port=settings.port,
            log_level=logs.uvicorn_level(settings.logs.level),
            log_config=None,  # its lines go to the process's log (entrypoints/logs.py)
            access_log=False,
            lifespan="on",
        )
        await _AnnouncingServer(config, announce).serve()


def check_store_groups(settings: Settings) -> None:
    """The leader's store groups each hold a connection while the API serves requests on the
    same pool: at least one must stay for them."""
    groups, pool = settings.admission_store_groups, settings.db_pool_size
    if groups >= pool:
        raise SettingExit(
            f"TUNEPLANE_ADMISSION_STORE_GROUPS={groups} leaves no connection of "
            f"TUNEPLANE_DB_POOL_SIZE={pool} for the API's requests",
            f"set TUNEPLANE_ADMISSION_STORE_GROUPS below {pool}, or raise TUNEPLANE_DB_POOL_SIZE",
            "TUNEPLANE_ADMISSION_STORE_GROUPS",
        )


class _AnnouncingServer(uvicorn.Server):
    """Prints ``announce`` (`tp up`'s "… Ctrl-C stops it.") once it accepts connections, never
    before: a client acting on it is never refused (CI found one refused when it came first)."""

    def __init__(self, config: uvicorn.Config, announce: str) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.announce and self.started:
            logs.say(self.announce)


def gang_settings(settings: Settings) -> GangSettings:
    lost = settings.node_lost_after_seconds
    return GangSettings(
        prepare_timeout=timedelta(seconds=settings.prepare_timeout_seconds),
        ports=settings.rendezvous_ports,
        link_timeout=settings.node_session_timeout,
        lost_after=timedelta(seconds=lost) if lost > 0 else None,
    )


async def prepare_fleet(ctx: Context, settings: Settings, attempts: int = 3) -> None:
    """Apply TUNEPLANE_FLEET_FILE if set; then give an empty system its defaults (a local pool
    of this host, a default queue). A bad file stops the start with an error naming the entry.
    Both steps are idempotent; a race with another process starting at once is retried."""
    config = fleet_config.load(settings.fleet_file).to_config() if settings.fleet_file else None
    for attempt in range(1, attempts + 1):
        try:
            if config is not None:
                summary = await apply_fleet_config(ctx, config)
                log.info(
                    "fleet file %s applied: %d created, %d changed, %d unchanged",
                    settings.fleet_file,
                    len(summary.created),
                    len(summary.changed),
                    summary.unchanged,
                )
            created = await ensure_defaults(
                ctx,
                *fleet_config.host_resources(),
                backend=settings.default_backend,
                gpus=lambda: _local_gpus(settings),  # detected only for a new pool
            )
        except Conflict:
            if attempt == attempts:
                raise
            await asyncio.sleep(0.2 * attempt)
            continue
        if created:
            log.info("defaults created: %s", ", ".join(created))
        return


def _local_gpus(settings: Settings) -> tuple[int, str | None]:
    """The GPUs pool ``local`` offers: with the node backend (its node is this host's daemon),
    this host's GPUs of one model as the daemon will detect them; none otherwise (the local
    backend runs CPU members) or where the host has several models (`tp fleet pool set`)."""
    if settings.default_backend != "node":
        return 0, None
    probe = open_probe(load_one(NodeSettings, "fake_nvml"))
    try:
        return one_model(probe.inventory())
    finally:
        probe.close()


async def first_admin_token(settings: Settings) -> str | None:
    """Create the first admin token on a fresh database; keep a 0600 copy in the state dir."""
    async with started(SetupContainer(settings=settings)) as container:
        return await first_admin(await resolve(container.context), settings.state_dir)


async def first_admin(ctx: Context, state_dir: Path) -> str | None:
    """The first admin token on a fresh database, its 0600 copy kept in ``state_dir``; None
    when the database had a token (a later start)."""
    token = await bootstrap_admin(ctx)
    if token is not None:
        _keep_admin_token(state_dir, token)
    return token


def first_start_text(path: Path, token: str, url: str, terminal: bool) -> str:
    """What `tp serve`'s bootstrap prints: the file's path and how to log in; the token itself
    only on a terminal (an operator reading it once, as `tp up` shows it), never into a log
    collector or a file (where the 0600 copy is the one to use)."""
    text = (
        f"first start: created user admin and its token, written to {path} (0600); "
        f"log in with:  tp login --server {url} --token $(cat {path})"
    )
    if terminal:
        text += f"\nthe admin token (shown once): {token}"
    return text


def _keep_admin_token(state_dir: Path, token: str) -> Path | None:
    """Write the token to ``<state_dir>/admin-token`` (0600, atomically); its path. The token
    is already stored (hashed) in the database and exists nowhere else: if the file cannot be
    written, it is printed to stderr once instead of being lost (and None returned)."""
    path = state_dir / ADMIN_TOKEN_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, (token + "\n").encode())
    except OSError as exc:
        logs.say(
            f"warning: cannot write the first admin token to {path}: {exc.strerror or exc}\n"
            f"the admin token (shown once, keep it): {token}",
            stream=sys.stderr,
            level=logging.WARNING,
        )
        return None
    return path


def saved_admin_token(state_dir: Path) -> str | None:
    with contextlib.suppress(OSError):
        return (state_dir / ADMIN_TOKEN_FILE).read_text().strip() or None
    return None
