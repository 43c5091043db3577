"""`tp collector`: a host's metrics collector (usually started by `tp node run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import Parameter

DEFAULT_SPOOL_MB = (
    2048  # adapters.telemetry.collector.DEFAULT_SPOOL_MB (not imported: keep `tp` light)
)


def collector(
    *,
    spool: Annotated[Path, Parameter(help="spool directory, on a local disk of this host")],
    members: Annotated[Path, Parameter(help="directory of member files (the node daemon's)")],
    gateway: Annotated[str, Parameter(help="the telemetry gateway, HOST:PORT")],
    ca: Annotated[Path, Parameter(help="CA certificate that signed the gateway's certificate")],
    server_name: Annotated[
        str | None, Parameter(help="name the gateway's certificate must carry (default: HOST)")
    ] = None,
    max_spool_mb: Annotated[
        int, Parameter(help="spool capacity; when full, reading pauses (the files wait)")
    ] = DEFAULT_SPOOL_MB,
    poll: Annotated[float, Parameter(help="seconds between looks at the files")] = 0.5,
    ignore_term: Annotated[
        bool,
        Parameter(
            negative="",
            help="ignore SIGTERM, stop on SIGINT only (a Slurm member's collector: docs/slurm.md)",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        Parameter(
            help="serve /metrics on this port (TUNEPLANE_COLLECTOR_METRICS_PORT; address "
            "TUNEPLANE_METRICS_HOST, default 127.0.0.1; default: no metrics listener)"
        ),
    ] = None,
) -> int:
    """Collect members' metrics (TensorBoard event files, JSONL) into a durable spool and ship
    them to the telemetry gateway with each member's collector token (docs/telemetry.md)."""
    from entrypoints.cli import output

    if max_spool_mb < 1:
        output.err.print(
            f"error: --max-spool-mb {max_spool_mb} is too small\nfix: give at least 1 (MiB)",
            markup=False,
        )
        return 2
    if not 0 < poll <= 60:
        output.err.print(
            f"error: --poll {poll} is out of range\nfix: give seconds between 0 and 60, e.g. 0.5",
            markup=False,
        )
        return 2
    from adapters.telemetry.collector import CollectorOptions
    from entrypoints.collector import run_collector

    options = CollectorOptions(
        spool, members, gateway, ca, server_name, max_spool_mb, poll, ignore_term
    )
    return run_collector(options, metrics_port)
