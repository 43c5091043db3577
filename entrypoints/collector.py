"""`tp collector`: a host's metrics collector (docs/telemetry.md).

Reads the members directory (one 0600 JSON file per member, written by the node daemon), tails
each member's metrics directory into the durable spool and ships it to the telemetry gateway
with the member's token. The directory is read again every poll: a new file starts a member, a
changed token is used for the next stream, a file that is gone stops the member (its spooled
records stay). A member whose file says ``"ended": true`` is read to its end and shipped; then
``<member>.drained`` is written beside its file and the member is let go. A malformed member
file is reported (once per version of the file) and skipped. Nothing the files or the gateway do
stops the collector; SIGTERM and SIGINT stop it cleanly (the spool is durable anyway); with
``--ignore-term`` only SIGINT does (a Slurm member's collector, which must outlive the SIGTERM
Slurm sends to every process of a stopped job long enough to ship: docs/slurm.md).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
import sys
from dataclasses import replace

from adapters.telemetry.collector import CollectorOptions
from domain.errors import InvalidInput, TunePlaneError
from entrypoints import logs
from entrypoints.containers.collector import CollectorContainer
from entrypoints.containers.lifecycle import resolve, started
from entrypoints.metrics_listener import checked_port, start_metrics
from entrypoints.process import TELEMETRY_PORT, run_server, split_server, until_signalled
from entrypoints.settings_loader import load_one
from entrypoints.settings_sections import NodeSettings

log = logging.getLogger("tuneplane.collector")


def _more_descriptors() -> None:
    """One descriptor per source is kept open: raise the soft limit to the hard one."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20), hard))


async def serve_collector(options: CollectorOptions, metrics_port: int | None = None) -> None:
    host, port = split_server(options.gateway, "--gateway", "the telemetry gateway", TELEMETRY_PORT)
    if not options.members.is_dir():
        raise InvalidInput(
            f"--members {options.members} is not a directory",
            fix="pass the directory where the node daemon writes member files",
            field="members",
        )
    if not options.ca.is_file():
        raise InvalidInput(
            f"--ca {options.ca} is not a file",
            fix="pass the CA certificate (PEM) that signed the telemetry gateway's certificate",
            field="ca",
        )
    metrics_at = checked_port("collector", metrics_port)
    _more_descriptors()
    if metrics_at is not None:
        start_metrics("collector", metrics_at)
    async with started(CollectorContainer(options=options)) as container:
        collector = await resolve(container.collector)
        log.info(
            "collecting members of %s into %s, shipping to %s:%d",
            options.members,
            options.spool,
            host,
            port,
        )
        if options.ignore_term:  # Slurm signals every process of a stopped job: ship on
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # until the wrapper says stop
        stops = (signal.SIGINT,) if options.ignore_term else (signal.SIGTERM, signal.SIGINT)
        await until_signalled(collector.run(), stops)


def run_collector(options: CollectorOptions, metrics_port: int | None = None) -> int:
    logs.setup("collector")
    try:
        period = float(load_one(NodeSettings, "gpu_sample_seconds"))
        retry_max = float(load_one(NodeSettings, "collector_retry_max_seconds"))
        options = replace(options, gpu_sample_seconds=period, retry_max=retry_max)
        run_server(serve_collector(options, metrics_port))
    except TunePlaneError as exc:
        logs.report(exc, stream=sys.stderr)
        return 2
    return 0
