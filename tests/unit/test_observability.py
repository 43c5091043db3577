"""TunePlane's own metrics without a live process: the catalog's names and labels, the
Prometheus adapter and its no-op twin, the PromQL of deploy/observability/ against what the
adapter exposes, the docs' list, and the metrics settings. The live processes are scraped in
tests/e2e/test_up.py (every process of `tp up`) and tests/integration/test_metrics_port.py."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.observability.catalog import CATALOG
from adapters.observability.prometheus import (
    PrometheusInstruments,
    check_metrics_port,
    serve_metrics,
)
from application import instruments as i
from application.instruments import NO_INSTRUMENTS
from domain.errors import InvalidInput, Unavailable
from entrypoints.settings_loader import load
from entrypoints.settings_metrics import MetricsSettings
from tests.support.promql import exposed, expressions, metric_names

ROOT = Path(__file__).resolve().parents[2]
# labels that would take unbounded values: ids and names of users, jobs, nodes, tokens
UNBOUNDED = re.compile(r"job|attempt|member|user|owner|node|token|id$|path|instance|host")


def test_every_name_the_application_reports_is_in_the_catalog_and_back() -> None:
    named = {v for k, v in vars(i).items() if k.isupper() and isinstance(v, str)}
    assert named == {m.name for m in CATALOG}


@pytest.mark.parametrize("metric", CATALOG, ids=lambda m: m.name)
def test_names_follow_prometheus_conventions_and_labels_are_bounded(metric: object) -> None:
    from adapters.observability.catalog import Metric

    assert isinstance(metric, Metric)
    assert re.fullmatch(r"tuneplane_[a-z_]+", metric.name)
    assert metric.name.endswith("_total") == (metric.kind == "counter")
    if metric.kind == "histogram":
        assert metric.name.endswith(("_seconds", "_bytes"))
    assert not any(UNBOUNDED.search(label) for label in metric.labels), metric.labels
    assert metric.process in ("api", "node-gateway", "telemetry-gateway", "node", "collector")


def test_the_adapter_records_what_it_is_told_and_replace_drops_what_is_gone() -> None:
    measure = PrometheusInstruments()
    measure.inc(i.COMMITS, outcome="created")
    measure.inc(i.COMMITS, 2, outcome="replayed")
    measure.observe(i.BATCH_SECONDS, 0.02)
    with measure.timer(i.ADMISSION_SECONDS):
        pass
    measure.replace(i.PENDING_JOBS, {"default": 3, "big": 1})
    measure.replace(i.PENDING_JOBS, {"default": 2})  # queue big is gone
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(measure.exposition().decode())
        for s in f.samples
    }
    assert samples[("tuneplane_submissions_commits_total", (("outcome", "created"),))] == 1
    assert samples[("tuneplane_submissions_commits_total", (("outcome", "replayed"),))] == 2
    assert samples[("tuneplane_telemetry_batch_duration_seconds_count", ())] == 1
    assert samples[("tuneplane_telemetry_batch_duration_seconds_bucket", (("le", "0.025"),))] == 1
    assert samples[("tuneplane_scheduler_pass_duration_seconds_count", ())] == 1
    assert samples[("tuneplane_scheduler_pending_jobs", (("queue", "default"),))] == 2
    assert ("tuneplane_scheduler_pending_jobs", (("queue", "big"),)) not in samples


def test_the_adapter_refuses_a_label_its_metric_does_not_declare() -> None:
    measure = PrometheusInstruments()
    with pytest.raises(ValueError):
        measure.inc(i.COMMITS, outcome="created", job="job-1")
    with pytest.raises(KeyError):
        measure.inc("tuneplane_not_a_metric_total")


def test_the_no_op_twin_takes_every_call() -> None:
    NO_INSTRUMENTS.inc(i.COMMITS, outcome="created")
    NO_INSTRUMENTS.observe(i.BATCH_SECONDS, 1.0)
    NO_INSTRUMENTS.set(i.NODE_STREAMS, 1)
    NO_INSTRUMENTS.replace(i.PENDING_JOBS, {"q": 1})
    with NO_INSTRUMENTS.timer(i.ADMISSION_SECONDS):
        pass


@pytest.mark.parametrize("where", sorted(expressions()))
def test_every_dashboard_panel_and_alert_rule_names_a_metric_tuneplane_exposes(where: str) -> None:
    """Against the adapter's real exposition; tests/e2e/test_up.py checks the live processes."""
    names = metric_names(expressions()[where])
    assert names, f"{where} selects no metric"
    offered = exposed(PrometheusInstruments().exposition().decode())
    assert names <= offered, f"{where} names {sorted(names - offered)}"


def test_every_metric_is_documented_in_operations_md() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    missing = [m.name for m in CATALOG if f"`{m.name}`" not in section]
    assert not missing, missing


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_metrics_port_out_of_range_is_refused_naming_the_fix(port: int) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_metrics_port(port, "--metrics-port")
    assert "--metrics-port" in caught.value.message
    assert "1 to 65535" in (caught.value.fix or "")


def test_a_metrics_port_in_use_is_refused_naming_the_fix() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(Unavailable) as caught:
            serve_metrics("127.0.0.1", port)
    assert f"127.0.0.1:{port}" in caught.value.message
    assert "another --metrics-port" in (caught.value.fix or "")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TUNEPLANE_API_METRICS": "public"}, "not open, token or off"),
        ({"TUNEPLANE_NODE_METRICS_PORT": "0"}, "TUNEPLANE_NODE_METRICS_PORT='0'"),
        ({"TUNEPLANE_COLLECTOR_METRICS_PORT": "abc"}, "TUNEPLANE_COLLECTOR_METRICS_PORT='abc'"),
        ({"TUNEPLANE_NODE_GATEWAY_METRICS_PORT": "-5"}, "TUNEPLANE_NODE_GATEWAY_METRICS_PORT"),
    ],
)
def test_bad_metrics_settings_stop_the_process_naming_the_variable(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        load(MetricsSettings, env)
    assert says in str(caught.value)
    assert "fix:" in str(caught.value)


def test_metrics_settings_default_to_an_open_api_and_no_other_listener() -> None:
    settings = load(MetricsSettings, {})
    assert (settings.api, settings.host) == ("open", "127.0.0.1")
    ports = (settings.node_gateway_port, settings.telemetry_gateway_port, settings.node_port)
    assert ports == (None, None, None) and settings.collector_port is None
