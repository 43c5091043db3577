"""``--metrics-port``: a long-running process without an HTTP server of its own (a gateway, the
node daemon, the collector) serves its metrics on a port of its own (docs/operations.md#metrics).
"""

from __future__ import annotations

from typing import Any

from adapters.observability.prometheus import check_metrics_port, serve_metrics
from entrypoints.settings_loader import load_one
from entrypoints.settings_metrics import MetricsSettings


def checked_port(which: str, flag: int | None) -> int | None:
    """The metrics port of process ``which`` (node_gateway, telemetry_gateway, node,
    collector): the flag, else its setting, else None (no listener); checked now."""
    port = flag if flag is not None else load_one(MetricsSettings, f"{which}_port")
    if port is not None:
        check_metrics_port(int(port), "--metrics-port")
    return None if port is None else int(port)


def start_metrics(which: str, flag: int | None) -> Any:
    """Serve this process's metrics if a port is set; the server, or None."""
    port = checked_port(which, flag)
    if port is None:
        return None
    return serve_metrics(str(load_one(MetricsSettings, "host")), port)
