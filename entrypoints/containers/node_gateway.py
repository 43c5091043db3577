"""The node gateway's container (`tp gateway node`): PostgreSQL (repositories, signals, the keys
that sign members' collector tokens) and the blob store (nodes fetch Job Capsules and sources
through it). No backend, no catalog: the nodes run the members."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.collector_tokens import CollectorTokens
from adapters.grpc.node_gateway import NodeGateway
from adapters.observability.prometheus import process_instruments
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.system import RandomIds, SystemClock, new_secret
from application.context import Context
from application.node_control import ControlSettings, NodeControl
from domain.blob_ports import BlobStore
from domain.coordination_ports import Signals
from entrypoints.containers import database
from entrypoints.containers.blobs import blob_store
from entrypoints.containers.sql_engine import database_engine
from entrypoints.settings import Settings


def _context(
    settings: Settings,
    engine: AsyncEngine,
    blobs: BlobStore,
    signals: Signals,
    tokens: CollectorTokens,
) -> Context:
    return Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=RandomIds(),
        new_secret=new_secret,
        blobs=blobs,
        limits=settings.limits,
        signals=signals,
        tokens=tokens,
        telemetry=database.telemetry_settings(settings),
        instruments=process_instruments(),  # docs/operations.md#metrics
    )


def control_settings(settings: Settings) -> ControlSettings:
    """The node sessions: heartbeats, credential rotation, when a session is dead."""
    return ControlSettings(
        heartbeat=timedelta(seconds=settings.heartbeat_seconds),
        rotate_every=timedelta(seconds=settings.credential_rotate_seconds),
        rotation_grace=timedelta(seconds=settings.credential_grace_seconds),
        # as the control plane's "its gateway died" limit (entrypoints/server.py)
        session_timeout=settings.node_session_timeout,
    )


def _control(ctx: Context, settings: Settings) -> NodeControl:
    """The node sessions this process holds, named for the host and process (several gateways
    can serve one database)."""
    name = f"{socket.gethostname()}:{os.getpid()}"
    return NodeControl(ctx, name, control_settings(settings))


class NodeGatewayContainer(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    engine = providers.Resource(database_engine, settings=settings)
    signals = providers.Resource(database.signals, settings=settings)
    blobs = providers.Resource(blob_store, settings=settings)
    metrics_pool = providers.Resource(database.metrics_pool, settings=settings)
    signing_keys = providers.Singleton(database.signing_keys, settings=settings, pool=metrics_pool)
    tokens = providers.Singleton(CollectorTokens, keys=signing_keys)
    context = providers.Singleton(
        _context, settings=settings, engine=engine, blobs=blobs, signals=signals, tokens=tokens
    )
    control = providers.Singleton(_control, ctx=context, settings=settings)
    gateway = providers.Singleton(NodeGateway, control)
