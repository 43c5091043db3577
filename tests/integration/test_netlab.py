"""The multi-host test's lab (tests/support/netlab.py) leaves nothing behind: ``close()`` ends
what runs in its namespaces and removes them, their veths and their hosts files; ``sweep()``
removes what a killed run left, and nothing of a run still going."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support import netlab

pytestmark = [pytest.mark.integration]


def _ours(prefix: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found = [ln.split()[0] for ln in names.splitlines() if ln.startswith(prefix)]
    found += [w.rstrip(":") for w in links.split() if w.startswith(prefix.replace("-", ""))]
    found += (
        [p.name for p in netlab.NETNS_ETC.glob(f"{prefix}*")] if netlab.NETNS_ETC.is_dir() else []
    )
    return found


@pytest.fixture(autouse=True)
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


def test_close_ends_its_processes_and_removes_everything() -> None:
    lab = netlab.Lab(["a", "b"], pid=os.getpid()).up()
    prefix = f"{netlab.PREFIX}-{lab.pid}-"
    try:
        sleeper = subprocess.Popen(lab.argv("a", ["sleep", "600"]))
        assert lab.can_connect("a", "127.0.0.1", 9) is False  # nothing listens: refused
        assert (
            (netlab.NETNS_ETC / f"{prefix}b" / "hosts")
            .read_text()
            .endswith(f"{lab.hosts['b'].address} b.{lab.domain}\n")
        )
    finally:
        lab.close()
    assert sleeper.wait(10) == -9
    assert _ours(prefix) == []


def test_sweep_removes_a_dead_runs_lab_and_keeps_a_live_ones() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = netlab.Lab(["x"], pid=dead.pid).up()  # as a run killed by SIGKILL leaves it
    data = netlab.SCRATCH / f"{netlab.PREFIX}-{dead.pid}-pg-left"
    data.mkdir()
    live = netlab.Lab(["y"], pid=os.getpid()).up()
    try:
        netlab.sweep()
        assert _ours(f"{netlab.PREFIX}-{dead.pid}-") == [] and not data.exists()
        assert len(_ours(f"{netlab.PREFIX}-{os.getpid()}-")) == 4  # 2 namespaces, etc, link
    finally:
        left.close()
        live.close()
