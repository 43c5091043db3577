"""`tp collector`: a host's metrics collector (usually started by `tp node run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter


def collector(
    *,
    spool: Annotated[Path, Parameter(help="spool directory on a local disk of this host")],
    members: Annotated[Path, Parameter(help="directory of member files (the node daemon's)")],
    gateway: Annotated[str, Parameter(help="the telemetry gateway, HOST:PORT")],
    ca: Annotated[Path, Parameter(help="CA certificate that signed the gateway's certificate")],
    max_spool_mb: Annotated[
        int, Parameter(help="spool capacity; when full, reading pauses (the files wait)")
    ] = 1024,
    poll: Annotated[float, Parameter(help="seconds between looks at the files")] = 0.5,
) -> int:
    """Collect members' metrics (TensorBoard event files, JSONL) into a durable spool and ship
    them to the telemetry gateway with each member's collector token (docs/telemetry.md)."""
    from entrypoints.collector import CollectorOptions, run_collector

    if max_spool_mb < 1 or poll <= 0:
        from entrypoints.cli import output

        output.err.print("error: --max-spool-mb must be >= 1 and --poll > 0", markup=False)
        return 2
    return run_collector(CollectorOptions(spool, members, gateway, ca, max_spool_mb, poll))


def register(app: App) -> None:
    app.command(collector, name="collector")
