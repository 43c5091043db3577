"""The composition root: which adapter serves which port, chosen from Settings.

Tests and the simulator do not use this container: they build ``Context`` with plain factories
and in-memory adapters. Only entrypoints (the API server, ``tp up``) wire real adapters here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.blobs import FilesystemBlobStore
from adapters.catalog import default_catalog
from adapters.collector_tokens import CollectorTokens
from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import LOCAL_RUNTIMES
from adapters.node.backend import NodeBackend
from adapters.outputs import FilesystemOutputs
from adapters.postgres.engine import check_reachable, create_engine
from adapters.postgres.metrics import PostgresMetrics, create_pool
from adapters.postgres.signals import PostgresSignals
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.slurm.backend import SlurmBackend
from adapters.system import RandomIds, SystemClock, new_secret
from application.context import Context, TelemetrySettings
from domain.blob_ports import BlobStore
from domain.coordination_ports import NO_SIGNALS, Signals
from domain.errors import InvalidInput, Unavailable
from domain.ports import ExecutionBackend
from entrypoints.kubernetes import kubernetes_backends
from entrypoints.settings import Settings
from entrypoints.slurm_wiring import slurm_resource

log = logging.getLogger(__name__)


def require_database(settings: Settings) -> str:
    """The database URL; a clear error without one (before the container's resources, which
    all need it, start failing at once)."""
    if not settings.database_url:
        raise InvalidInput(
            "no database configured",
            fix="set TUNEPLANE_DATABASE_URL, or use `tp up`, which starts a private PostgreSQL",
        )
    return settings.database_url


async def reach_database(settings: Settings) -> str:
    """``require_database``, then one connection: a clear error for a database that is down or
    refuses us, before the container's resources start (each would fail its own way)."""
    url = require_database(settings)
    await check_reachable(url)
    return url


async def _engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    url = require_database(settings)
    # no overflow: connections beyond the pool would be opened and closed per request (a fork
    # and a SCRAM handshake each); waiting for a pooled connection is cheaper
    engine = create_engine(url, pool_size=settings.db_pool_size, max_overflow=0)
    try:
        yield engine
    finally:
        await engine.dispose()


async def _signals(settings: Settings) -> AsyncIterator[Signals]:
    if not settings.signals:
        yield NO_SIGNALS
        return
    signals = PostgresSignals(settings.database_url or "")
    await signals.start()
    try:
        yield signals
    finally:
        await signals.close()


async def _metrics_pool(settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(settings.database_url or "")
    try:
        yield pool
    finally:
        await pool.close()


def _signing_keys(settings: Settings, pool: asyncpg.Pool) -> PostgresSigningKeys:
    rotate = timedelta(seconds=settings.signing_key_rotate_seconds)
    lifetime = timedelta(seconds=settings.collector_token_seconds)
    return PostgresSigningKeys(pool, rotate_after=rotate, keep_for=rotate + lifetime)


async def _blobs(settings: Settings) -> AsyncIterator[BlobStore]:
    """The filesystem store (the default, `tp up` included), or S3 when TUNEPLANE_BLOB_STORE
    is an s3:// URL: then the bucket is checked first, and a process that cannot use it stops
    with what to fix, unless the store is only unreachable (it may come back)."""
    location = settings.blob_s3
    if location is None:
        yield FilesystemBlobStore(settings.blob_dir)
        return
    from adapters.blobs_s3 import Misconfigured, S3BlobStore  # the AWS SDK only for S3

    async with S3BlobStore.connect(
        location,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        addressing_style=settings.s3_addressing_style,
    ) as store:
        try:
            await store.check()
        except Misconfigured:
            raise  # the process stops with what to fix
        except Unavailable as exc:
            log.warning("%s; going on, requests that need a blob get 503 until it is back", exc)
        yield store


async def _docker(settings: Settings) -> AsyncIterator[DockerBackend]:
    backend = DockerBackend(settings.docker_host)
    try:
        yield backend
    finally:
        await backend.close()


def _context(
    settings: Settings,
    engine: AsyncEngine,
    docker: DockerBackend,
    blobs: BlobStore,
    signals: Signals,
    metrics: PostgresMetrics,
    tokens: CollectorTokens,
    kubernetes: dict[str, ExecutionBackend],
    slurm: SlurmBackend | None = None,
) -> Context:
    return Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=RandomIds(),
        catalog=default_catalog(LOCAL_RUNTIMES),
        backends={
            "local": docker,
            "node": NodeBackend(docker),
            **kubernetes,
            **({"slurm": slurm} if slurm is not None else {}),  # docs/slurm.md
        },
        blobs=blobs,
        new_secret=new_secret,
        limits=settings.limits,
        signals=signals,
        metrics=metrics,
        tokens=tokens,
        telemetry=TelemetrySettings(
            token_lifetime=timedelta(seconds=settings.collector_token_seconds),
            grace=timedelta(seconds=settings.telemetry_grace_seconds),
        ),
        outputs=FilesystemOutputs(settings.output_dir),
        backend_outputs={"slurm": slurm.outputs} if slurm is not None else {},
    )


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    engine = providers.Resource(_engine, settings=settings)
    docker = providers.Resource(_docker, settings=settings)
    signals = providers.Resource(_signals, settings=settings)
    blobs = providers.Resource(_blobs, settings=settings)
    metrics_pool = providers.Resource(_metrics_pool, settings=settings)
    metrics = providers.Singleton(PostgresMetrics, pool=metrics_pool)
    signing_keys = providers.Singleton(_signing_keys, settings=settings, pool=metrics_pool)
    tokens = providers.Singleton(CollectorTokens, keys=signing_keys)
    kubernetes = providers.Resource(kubernetes_backends, settings=settings, tokens=tokens)
    slurm = providers.Resource(
        slurm_resource,
        settings=settings.provided.slurm,
        tokens=tokens,
        token_lifetime_seconds=settings.provided.collector_token_seconds,
    )
    context = providers.Singleton(
        _context,
        settings=settings,
        engine=engine,
        docker=docker,
        blobs=blobs,
        signals=signals,
        metrics=metrics,
        tokens=tokens,
        kubernetes=kubernetes,
        slurm=slurm,
    )
