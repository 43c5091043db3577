"""``--metrics-port`` for real: `tp collector` (the lightest of the four processes that take it;
the gateways and the daemon share ``entrypoints/metrics_listener.py`` and are scraped on their
ports in tests/e2e/test_up.py) serves its registry on the port given, at TUNEPLANE_METRICS_HOST.
A port in use is refused by a real process in tests/e2e/test_cli_every_command.py's table, and
by the adapter in tests/unit/test_observability.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from adapters.tls import dev_server_context
from tests.fixtures.server import TP, free_port
from tests.support.scrape import value, wait_for

pytestmark = pytest.mark.integration


def _collector(tmp_path: Path, name: str, port: int) -> list[str]:
    (tmp_path / "members").mkdir(exist_ok=True)
    _, ca = dev_server_context(tmp_path / "pki-state", ["localhost"])  # a real CA; no gateway
    return [
        TP, "collector", "--spool", str(tmp_path / name), "--members", str(tmp_path / "members"),
        "--gateway", "127.0.0.1:1", "--ca", str(ca), "--metrics-port", str(port),
    ]  # fmt: skip


def test_the_collector_serves_metrics_on_the_port_its_flag_gives(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env["TUNEPLANE_METRICS_HOST"] = "127.0.0.1"
    log = (tmp_path / "collector.log").open("wb")
    proc = subprocess.Popen(
        _collector(tmp_path, "spool", port), env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        text, samples = wait_for(
            f"http://127.0.0.1:{port}/metrics",
            lambda s: ("tuneplane_collector_members", frozenset()) in s,
            timeout=30,
        )
        assert value(samples, "tuneplane_collector_members") == 0
        assert value(samples, "tuneplane_collector_spool_bytes") >= 0
        assert "process_resident_memory_bytes" in text  # the process's own, beside ours
    finally:
        proc.terminate()
        proc.wait(30)
