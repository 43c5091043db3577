"""The API process's container (`tp serve`, and `tp up`'s control plane): every backend, the
blob store, PostgreSQL (repositories, signals, metrics, signing keys) and the leader lease."""

from __future__ import annotations

from collections.abc import AsyncIterator

from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.catalog import default_catalog
from adapters.checkpoint_dirs import FilesystemCheckpoints
from adapters.collector_tokens import CollectorTokens
from adapters.docker.backend import DockerBackend
from adapters.docker.runtimes import LOCAL_RUNTIMES
from adapters.node.backend import NodeBackend
from adapters.observability.prometheus import process_instruments
from adapters.outputs import FilesystemOutputs
from adapters.postgres.lease import PostgresLeaderLease
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.postgres.webhooks import PostgresWebhooks
from adapters.secret_box import read_key_file
from adapters.slurm.backend import SlurmBackend
from adapters.system import RandomIds, SystemClock, new_secret
from adapters.webhook_sender import HttpWebhookSender, jitter
from application.context import Context
from domain.blob_ports import BlobStore
from domain.coordination_ports import Signals
from domain.ports import ExecutionBackend
from entrypoints.containers import database
from entrypoints.containers.blobs import blob_store
from entrypoints.containers.sql_engine import database_engine
from entrypoints.kubernetes import kubernetes_backends
from entrypoints.settings import Settings
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings
from entrypoints.slurm_wiring import slurm_resource


async def _webhook_sender(settings: Settings) -> AsyncIterator[HttpWebhookSender]:
    sender = HttpWebhookSender(destinations=settings.webhooks.destinations())
    try:
        yield sender
    finally:
        await sender.close()


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
    webhook_sender: HttpWebhookSender,
    slurm: SlurmBackend | None = None,
) -> Context:
    return Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=RandomIds(),
        catalog=default_catalog(LOCAL_RUNTIMES),
        backends={
            "local": docker,
            **kubernetes,
            **({"slurm": slurm} if slurm is not None else {}),  # docs/slurm.md
        },
        # its gangs launch through the ledger; host-process nodes run no image (node-backend.md)
        coordinated={"node": NodeBackend(docker, host_processes=_host_processes())},
        capacity={"slurm": slurm} if slurm is not None else {},  # Slurm reports its own
        blobs=blobs,
        new_secret=new_secret,
        limits=settings.limits,
        signals=signals,
        metrics=metrics,
        tokens=tokens,
        telemetry=database.telemetry_settings(settings),
        outputs=FilesystemOutputs(settings.output_dir),
        checkpoints=FilesystemCheckpoints(settings.checkpoint_dir),
        backend_outputs={"slurm": slurm.outputs} if slurm is not None else {},
        backend_checkpoints={"slurm": slurm.checkpoints} if slurm is not None else {},
        notifications=settings.webhooks.notifications(
            PostgresWebhooks(engine),
            webhook_sender,
            jitter,
            read_key_file(settings.webhooks.key_path(settings.state_dir)),
        ),
        instruments=process_instruments(),  # docs/operations.md#metrics
    )


def _host_processes() -> bool:
    return bool(load_one(NodeSettings, "executor") == "process")


def _lease(settings: Settings) -> PostgresLeaderLease:
    """The lock that makes one API process the leader, which runs the control loop."""
    return PostgresLeaderLease(
        database.require_database(settings), keepalive_seconds=settings.db_keepalive_seconds
    )


class ApiContainer(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    engine = providers.Resource(database_engine, settings=settings)
    docker = providers.Resource(_docker, settings=settings)
    signals = providers.Resource(database.signals, settings=settings)
    blobs = providers.Resource(blob_store, settings=settings)
    metrics_pool = providers.Resource(database.metrics_pool, settings=settings)
    metrics = providers.Singleton(PostgresMetrics, pool=metrics_pool)
    signing_keys = providers.Singleton(database.signing_keys, settings=settings, pool=metrics_pool)
    tokens = providers.Singleton(CollectorTokens, keys=signing_keys)
    kubernetes = providers.Resource(kubernetes_backends, settings=settings, tokens=tokens)
    slurm = providers.Resource(
        slurm_resource,
        settings=settings.provided.slurm,
        tokens=tokens,
        token_lifetime_seconds=settings.provided.collector_token_seconds,
    )
    lease = providers.Singleton(_lease, settings=settings)
    webhook_sender = providers.Resource(_webhook_sender, settings=settings)
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
        webhook_sender=webhook_sender,
        slurm=slurm,
    )
