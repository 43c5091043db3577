"""`tp gateway node` and `tp gateway telemetry` up to their start: the settings, the metrics
listener and the checks a start can fail (the listen address, a database configured), before
the gateways' modules load (``entrypoints.gateway``: a second of CPU). A refused start costs a
fraction of that; a running gateway checks the same again (it can be started by `tp up`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from domain.errors import TunePlaneError
from entrypoints import logs
from entrypoints.metrics_listener import start_metrics
from entrypoints.process import check_listen, require_database, run_server
from entrypoints.settings import Settings

Which = Literal["node", "telemetry"]


def where(which: str) -> str:
    """The settings of a gateway's listen address, for its errors."""
    return f"--host/--port or TUNEPLANE_{which.upper()}_GATEWAY_HOST/_PORT"


def run_gateway(
    which: Which, host: str | None, port: int | None, metrics_port: int | None = None
) -> int:
    """Run the ``which`` gateway process with its listen address overridden, serving its
    metrics on ``metrics_port`` (else TUNEPLANE_<WHICH>_GATEWAY_METRICS_PORT, else nowhere);
    the exit code."""
    logs.setup(f"{which}-gateway")
    changes: dict[str, Any] = {}
    if host is not None:
        changes[f"{which}_gateway_host"] = host
    if port is not None:
        changes[f"{which}_gateway_port"] = port
    settings = dataclasses.replace(Settings.from_env(), **changes)
    try:
        start_metrics(f"{which}_gateway", metrics_port)
        listen = (
            getattr(settings, f"{which}_gateway_host"),
            getattr(settings, f"{which}_gateway_port"),
        )
        check_listen(*listen, where(which))
        require_database(settings.database_url)
        from entrypoints import gateway  # the gateways' modules, once nothing refused the start

        serve = gateway.serve_node_gateway if which == "node" else gateway.serve_telemetry_gateway
        run_server(serve(settings))
    except TunePlaneError as exc:
        logs.report(exc)
        return 1
    return 0
