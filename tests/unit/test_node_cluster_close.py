"""The node cluster fixture stops every process it started, even when one will not stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import nodes
from tests.fixtures.nodes import Daemon, NodeCluster

pytestmark = pytest.mark.unit

# Prints once its SIGTERM handler is in place, so the test never signals it before that.
STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def spawn(stubborn: bool) -> subprocess.Popen[bytes]:
    code = STUBBORN if stubborn else "import time; print('ready', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_a_process_that_ignores_sigterm_is_killed_and_the_timeout_raised() -> None:
    proc = spawn(stubborn=True)
    with pytest.raises(subprocess.TimeoutExpired):
        nodes._stop(proc, signal.SIGTERM, grace=0.5)
    assert proc.returncode == -signal.SIGKILL


def test_close_stops_every_process_when_the_gateway_will_not_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(nodes, "_stop", _quick_stop)
    cluster = NodeCluster(None, 0, tmp_path, "p", {})  # type: ignore[arg-type]
    cluster.gateway = spawn(stubborn=True)
    cluster.telemetry = spawn(stubborn=False)
    daemon = Daemon("n1", tmp_path, tmp_path / "n1.log", spawn(stubborn=False))
    cluster.daemons["n1"] = daemon
    gateway, telemetry, member = cluster.gateway, cluster.telemetry, daemon.proc
    with pytest.raises(subprocess.TimeoutExpired):
        cluster.close()
    assert gateway.returncode == -signal.SIGKILL
    assert telemetry.poll() == -signal.SIGTERM  # stopped although the gateway's stop failed
    assert member is not None and member.poll() == -signal.SIGTERM
    assert cluster.gateway is None and cluster.telemetry is None and daemon.proc is None


_real_stop = nodes._stop


def _quick_stop(proc: subprocess.Popen[bytes] | None, sig: int, grace: float = 15) -> None:
    _real_stop(proc, sig, grace=0.5)
