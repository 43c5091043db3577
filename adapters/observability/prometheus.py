"""The ``Instruments`` port on prometheus_client: one registry per process, its text exposition,
and a small HTTP listener for processes without an HTTP server of their own (the gateways, the
node daemon, the collector: ``--metrics-port``)."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)

from adapters.observability.catalog import BY_NAME, CATALOG, Metric
from domain.errors import InvalidInput, Unavailable

CONTENT_TYPE = CONTENT_TYPE_LATEST
# no `_created` sample beside every counter and histogram: it doubles a scrape's size and
# Prometheus' text format ignores it (docs/benchmarks.md#cost-of-the-metrics)
disable_created_metrics()  # type: ignore[no-untyped-call]


class PrometheusInstruments:
    """Every metric of the catalog, registered in ``registry``. Unknown names and labels are a
    bug of the caller: they raise (a unit test walks the catalog)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, Any] = {m.name: _make(m, self.registry) for m in CATALOG}
        self._lock = threading.Lock()

    def _labelled(self, name: str, labels: Mapping[str, str]) -> Any:
        metric = self._metrics[name]
        return metric.labels(**labels) if labels else metric

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self._labelled(name, labels).inc(amount)

    def observe(self, name: str, value: float, **labels: str) -> None:
        self._labelled(name, labels).observe(value)

    def set(self, name: str, value: float, **labels: str) -> None:
        self._labelled(name, labels).set(value)

    def replace(self, name: str, values: Mapping[str, float]) -> None:
        gauge = self._metrics[name]
        with self._lock:
            gauge.clear()
            for label, value in values.items():
                gauge.labels(label).set(value)

    def timer(self, name: str, **labels: str) -> AbstractContextManager[None]:
        return self._timed(self._labelled(name, labels))

    @staticmethod
    @contextmanager
    def _timed(histogram: Any) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            histogram.observe(time.perf_counter() - start)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)


def _make(m: Metric, registry: CollectorRegistry) -> Any:
    name = m.name.removesuffix("_total") if m.kind == "counter" else m.name
    if m.kind == "counter":
        return Counter(name, m.help, m.labels, registry=registry)
    if m.kind == "gauge":
        return Gauge(name, m.help, m.labels, registry=registry)
    return Histogram(name, m.help, m.labels, registry=registry, buckets=m.buckets)


_process: PrometheusInstruments | None = None
_process_lock = threading.Lock()


def process_instruments() -> PrometheusInstruments:
    """This process's one registry (made at first use, with the process's CPU, memory and
    descriptors, and Python's version)."""
    global _process
    with _process_lock:
        if _process is None:
            registry = CollectorRegistry(auto_describe=True)
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            _process = PrometheusInstruments(registry)
        return _process


def check_metrics_port(port: int, flag: str) -> None:
    if not 0 < port < 65536:
        raise InvalidInput(
            f"{flag} {port} is not a port",
            fix=f"give a whole number from 1 to 65535 for {flag}, or leave it out (no metrics "
            "listener)",
            field=flag.removeprefix("--").replace("-", "_"),
        )


def serve_metrics(host: str, port: int, flag: str = "--metrics-port") -> Any:
    """Serve this process's registry at ``http://host:port/metrics`` (a daemon thread); a clear
    error when it cannot listen there. Returns the server (``.shutdown()`` stops it)."""
    check_metrics_port(port, flag)
    try:
        server, _thread = start_http_server(port, host, registry=process_instruments().registry)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            raise Unavailable(
                f"cannot serve metrics on {host}:{port}: {why}",
                fix=f"stop what uses port {port}, or give another {flag}",
            ) from None
        raise InvalidInput(
            f"cannot serve metrics on {host}:{port}: {why}",
            fix="give an address of this machine for TUNEPLANE_METRICS_HOST (e.g. 127.0.0.1) "
            f"and a free port for {flag}",
            field=flag.removeprefix("--").replace("-", "_"),
        ) from None
    return server


__all__ = ["BY_NAME", "CONTENT_TYPE", "PrometheusInstruments", "process_instruments"]
