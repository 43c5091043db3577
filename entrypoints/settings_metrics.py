"""The settings of TunePlane's own metrics (docs/operations.md#metrics): who may read the API's
``/metrics``, and where the other processes serve theirs. Loaded by the same loader; documented
by the same generated table."""

from __future__ import annotations

from dataclasses import dataclass

from entrypoints.settings_loader import Port, SettingError, section, var

API_METRICS = ("open", "token", "off")


def _api_metrics(raw: str) -> str:
    value = raw.strip()
    if value not in API_METRICS:
        raise SettingError(
            f"TUNEPLANE_API_METRICS={raw!r} is not open, token or off",
            "set open (anyone who reaches the API's port), token (any valid API token) or off "
            "(no /metrics), or unset it (open)",
        )
    return value


@section
@dataclass(frozen=True)
class MetricsSettings:
    api: str = var(
        "open",
        env="TUNEPLANE_API_METRICS",
        section="metrics",
        parse=_api_metrics,
        doc="who may read the API's `/metrics` (on its own port): `open` (whoever reaches the "
        "port: counts, durations, queue and pool names, never an id, user or token), `token` "
        "(any valid API token), `off` (404)",
    )
    host: str = var(
        "127.0.0.1",
        env="TUNEPLANE_METRICS_HOST",
        section="metrics",
        doc="where the gateways, the node daemon and the collector serve `/metrics` (their "
        "metrics ports); `0.0.0.0` for a Prometheus on another host",
    )
    node_gateway_port: Port | None = var(
        None,
        env="TUNEPLANE_NODE_GATEWAY_METRICS_PORT",
        section="metrics",
        default_doc="unset: no metrics listener",
        doc="where the node gateway serves `/metrics` (its `--metrics-port` wins)",
    )
    telemetry_gateway_port: Port | None = var(
        None,
        env="TUNEPLANE_TELEMETRY_GATEWAY_METRICS_PORT",
        section="metrics",
        default_doc="unset: no metrics listener",
        doc="where the telemetry gateway serves `/metrics` (its `--metrics-port` wins)",
    )
    node_port: Port | None = var(
        None,
        env="TUNEPLANE_NODE_METRICS_PORT",
        section="metrics",
        default_doc="unset: no metrics listener",
        doc="where the node daemon serves `/metrics` (its `--metrics-port` wins)",
    )
    collector_port: Port | None = var(
        None,
        env="TUNEPLANE_COLLECTOR_METRICS_PORT",
        section="metrics",
        default_doc="unset: no metrics listener",
        doc="where the collector serves `/metrics` (its `--metrics-port` wins)",
    )
