"""The composition root: which adapter serves which port, chosen from Settings.

Tests and the simulator do not use this container: they build ``Context`` with plain factories
and in-memory adapters. Only entrypoints (the API server, ``tp up``) wire real adapters here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.blobs import FilesystemBlobStore
from adapters.catalog import default_catalog
from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import LOCAL_RUNTIMES
from adapters.node.backend import NodeBackend
from adapters.postgres.engine import create_engine
from adapters.postgres.signals import PostgresSignals
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.system import RandomIds, SystemClock, new_secret
from application.context import Context
from domain.ports import NO_SIGNALS, Signals
from entrypoints.settings import Settings


async def _engine(settings: Settings) -> AsyncIterator[AsyncEngine]:
    if not settings.database_url:
        raise SystemExit(
            "error: no database configured (fix: set TUNEPLANE_DATABASE_URL, or use `tp up`, "
            "which starts a private PostgreSQL)"
        )
    # no overflow: connections beyond the pool would be opened and closed per request (a fork
    # and a SCRAM handshake each); waiting for a pooled connection is cheaper
    engine = create_engine(settings.database_url, pool_size=settings.db_pool_size, max_overflow=0)
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
    blobs: FilesystemBlobStore,
    signals: Signals,
) -> Context:
    return Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=RandomIds(),
        catalog=default_catalog(LOCAL_RUNTIMES),
        backends={"local": docker, "node": NodeBackend(docker)},
        blobs=blobs,
        new_secret=new_secret,
        limits=settings.limits,
        signals=signals,
    )


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    engine = providers.Resource(_engine, settings=settings)
    docker = providers.Resource(_docker, settings=settings)
    signals = providers.Resource(_signals, settings=settings)
    blobs = providers.Singleton(FilesystemBlobStore, root=settings.provided.blob_dir)
    context = providers.Singleton(
        _context, settings=settings, engine=engine, docker=docker, blobs=blobs, signals=signals
    )
