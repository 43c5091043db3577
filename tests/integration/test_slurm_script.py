"""deploy/dev/slurm.sh run again on a cluster one of whose daemons died starts only that daemon
(issue 19 item 7): slurmctld keeps running (a fresh start would be `slurmctld -c`, which drops
every job), so a job submitted before is still there."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.fixtures.slurm import SlurmCluster, _alive

pytestmark = pytest.mark.integration


def _run(cluster: SlurmCluster, *args: str) -> str:
    proc = subprocess.run(args, env=cluster.env(), capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@pytest.mark.parametrize("daemon", ["slurmrestd", "slurmd-n4"])
def test_a_rerun_restarts_only_the_dead_daemon_and_keeps_the_jobs(
    slurm_cluster: SlurmCluster, daemon: str
) -> None:
    cluster = slurm_cluster
    job = _run(cluster, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
    try:
        before = {d: cluster.pid(d) for d in ("slurmctld", "slurmrestd", "slurmd-n1", "slurmd-n4")}
        dead = before[daemon]
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _alive(dead):
            assert time.monotonic() < deadline, f"{daemon} still runs"
            time.sleep(0.05)

        proc = cluster.rerun()
        assert proc.returncode == 0, proc.stderr
        assert f"restarting only {daemon} of the cluster" in proc.stderr, proc.stderr
        after = {d: cluster.pid(d) for d in before}
        assert after[daemon] not in (None, dead)
        assert {d: p for d, p in after.items() if d != daemon} == {
            d: p for d, p in before.items() if d != daemon
        }  # slurmctld (no -c) and the others untouched
        assert _run(cluster, "squeue", "-h", "-j", job, "-o", "%i") == job  # the job is kept
        ping = subprocess.run(
            ["curl", "-sf", "--unix-socket", str(cluster.socket), "http://s/slurm/v0.0.38/ping"],
            capture_output=True,
        )
        assert ping.returncode == 0
        again = cluster.rerun()  # now healthy: nothing to do
        assert "answers; nothing to do" in again.stderr, again.stderr
    finally:
        subprocess.run(["scancel", job], env=cluster.env(), check=False)
    cluster.wait_idle()
