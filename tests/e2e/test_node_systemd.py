"""`tp node install --systemd` under a real systemd (tests/support/systemd.py boots this machine's
own systemd 252 in namespaces of its own): the units it writes are enabled and started by
systemd, the node joins with the token from its 0600 environment file, the collector ships a
member's metrics from inside its read-only hardening, and a daemon killed under systemd is
started again after its 2 s while its host-process member runs on (`KillMode=process`) and is
re-adopted, never started twice (docs/operations.md#systemd-units)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_node_backend import cli_for, submit
from tests.e2e.test_telemetry_e2e import wait_for
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import TP
from tests.support.systemd import booted

pytestmark = [pytest.mark.e2e]

Factory = Callable[..., Awaitable[NodeCluster]]
UNITS = ("tuneplane-node.service", "tuneplane-collector.service")


async def test_the_units_run_the_node_under_systemd_which_restarts_it_and_keeps_its_member(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(0, TUNEPLANE_NODE_EXECUTOR="process")
    state = tmp_path / "node"
    seen = Path(tempfile.mkdtemp(prefix="tp-go-", dir="/var/tmp"))  # members have their own /tmp
    os.chmod(seen, 0o755)
    go = seen / "go"
    with booted(tmp_path / "systemd") as systemd:
        done = systemd.run(
            TP, "node", "install", "--systemd",
            "--state-dir", str(state),
            "--server", f"127.0.0.1:{cluster.gateway_port}",
            "--ca", str(cluster.ca),
            "--telemetry-gateway", f"127.0.0.1:{cluster.telemetry_port}",
            "--join-token", cluster.join_token("s1"),
            "--name", "s1",
            "--executor", "process",
            "--cpus", str(cluster.cpus),
            "--memory-mb", str(cluster.memory_mb),
            "--advertise-address", "127.0.0.1",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr  # enabled and started
        assert systemd.systemctl("is-enabled", *UNITS).split() == ["enabled", "enabled"]
        await asyncio.to_thread(cluster.wait_connected, ["s1"])
        assert systemd.systemctl("is-active", *UNITS).split() == ["active", "active"]
        assert (state / "join-token.env").stat().st_mode & 0o777 == 0o600

        cli = await cli_for(cluster, tmp_path)
        job_id = submit(
            cli,
            'd="$TUNEPLANE_METRICS_DIR"; echo started; for s in 0 1 2; do '
            """printf '{"step": %d, "metrics": {"train/loss": %d}}\\n' $s $s >> "$d/l.jsonl"; """
            f"done; while [ ! -e {go} ]; do sleep 0.1; done; echo done",
            profile="nodes/cpu:0.5",
        )
        cli.wait_state(job_id, {"running"}, timeout=60)

        def shipped() -> dict[str, Any] | None:
            s = cluster.api("GET", f"/v1/jobs/{job_id}/metrics")
            counts = {x["tag"]: x["count"] for x in s["series"]}
            return s if counts.get("train/loss") == 3 else None

        wait_for(shipped, 60, "the member's metrics, through the collector unit")

        # the daemon's main process killed: systemd starts it again; the member runs on
        main = int(systemd.show(UNITS[0], "MainPID"))
        killed = systemd.run("systemctl", "kill", "--kill-whom=main", "--signal=SIGKILL", UNITS[0])
        assert killed.returncode == 0, killed.stderr

        def restarted() -> bool:
            again = systemd.show(UNITS[0], "MainPID")
            return systemd.show(UNITS[0], "NRestarts") == "1" and again not in ("0", str(main))

        wait_for(restarted, 30, "systemd to start the killed daemon again")
        await asyncio.to_thread(cluster.wait_connected, ["s1"])
        go.touch()
        job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)
        assert job["state"] == "succeeded", job
        out = cli("job", "logs", job_id).stdout
        assert out.count("started") == 1 and "done" in out, out  # re-adopted, never restarted
    shutil.rmtree(seen)
