"""The telemetry gateway's container (`tp gateway telemetry`): PostgreSQL only (metrics, and the
keys that check collectors' tokens), and the ingest use case over them."""

from __future__ import annotations

from datetime import timedelta

from dependency_injector import containers, providers

from adapters.collector_tokens import CollectorTokens
from adapters.grpc.telemetry_gateway import TelemetryGateway
from adapters.observability.prometheus import process_instruments
from adapters.postgres.metrics import PostgresMetrics
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.system import SystemClock
from application.telemetry import TelemetryIngest
from entrypoints.containers import database
from entrypoints.settings import Settings


def _grace(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.telemetry_grace_seconds)


class TelemetryGatewayContainer(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    pool = providers.Resource(database.metrics_pool, settings=settings, max_size=8)
    clock = providers.Singleton(SystemClock)
    keys = providers.Singleton(PostgresSigningKeys, pool)  # checks tokens; the API signs them
    ingest = providers.Singleton(
        TelemetryIngest,
        providers.Singleton(PostgresMetrics, pool),
        providers.Singleton(CollectorTokens, keys),
        clock,
        grace=providers.Callable(_grace, settings),
    )
    gateway = providers.Singleton(
        TelemetryGateway, ingest, instruments=providers.Callable(process_instruments)
    )
