"""The collector's container (`tp collector`): the durable spool, the TLS channel to the
telemetry gateway, the host's GPUs (the probe the system source samples them with), and the
collector that tails members into one and ships through the other. No database, no blob store,
no backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from dependency_injector import containers, providers
from grpclib.client import Channel

from adapters.grpc.telemetry_client import open_channel
from adapters.observability.prometheus import process_instruments
from adapters.telemetry.collector import Collector, CollectorOptions
from adapters.telemetry.spool import Spool
from adapters.telemetry.system import SystemSampler
from domain.gpus import GpuProbe
from entrypoints.gpu_probe import open_gpu_probe
from entrypoints.process import TELEMETRY_PORT, split_server


def _spool(options: CollectorOptions) -> Iterator[Spool]:
    spool = Spool(
        options.spool,
        max_bytes=options.max_spool_mb * 1024 * 1024,
        instruments=process_instruments(),
    )
    try:
        yield spool
    finally:
        spool.close()


def _channel(options: CollectorOptions) -> Iterator[Channel]:
    host, port = split_server(options.gateway, "--gateway", "the telemetry gateway", TELEMETRY_PORT)
    channel = open_channel(host, port, options.ca, options.server_name)
    try:
        yield channel
    finally:
        channel.close()


def _probe() -> Iterator[GpuProbe | None]:
    probe = open_gpu_probe()
    try:
        yield probe
    finally:
        if probe is not None:
            probe.close()


def _sampler(options: CollectorOptions, probe: GpuProbe | None) -> SystemSampler:
    return SystemSampler(options.spool / "system", probe, options.gpu_sample_seconds)


async def _collector(
    options: CollectorOptions, spool: Spool, channel: Channel, sampler: SystemSampler
) -> AsyncIterator[Collector]:
    collector = Collector(options, spool, channel, sampler, instruments=process_instruments())
    try:
        yield collector
    finally:
        await collector.close()


class CollectorContainer(containers.DeclarativeContainer):
    options = providers.Dependency(instance_of=CollectorOptions)
    spool = providers.Resource(_spool, options)
    channel = providers.Resource(_channel, options)
    probe = providers.Resource(_probe)  # opened once per collector process
    sampler = providers.Singleton(_sampler, options, probe)
    collector = providers.Resource(_collector, options, spool, channel, sampler)
