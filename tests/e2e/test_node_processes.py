"""The node backend with the host-process executor end to end (`--executor process`, issue 23):
the control plane, the gateways and node daemons, each a real process, running members as host
processes (no container engine): the runner's capsule check, the environment contract, the
member's account and view of the host, re-adoption after the daemon's kill -9, and limits."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.test_gpu_inventory import H200
from tests.e2e.test_node_backend import cli_for, submit
from tests.fixtures.nodes import NodeCluster
from tests.integration.test_process_executor import exists, runs

pytestmark = [pytest.mark.e2e]

Factory = Callable[..., Awaitable[NodeCluster]]
PROCESSES = {"TUNEPLANE_NODE_EXECUTOR": "process"}
NO_ENGINE = "unix:///nonexistent/no-container-engine-here.sock"
LOOK = (
    "echo rank=$RANK world=$WORLD_SIZE user=$(id -un) cwd=$(pwd) gpus=[$CUDA_VISIBLE_DEVICES];"
    " grep -c ' source.tar.gz$' /tuneplane/capsule/SHA256SUMS;"
    " env | grep -c -e DATABASE_URL -e JOIN_TOKEN -e GATEWAY_KEY;"
    " echo listed=$(ls -A {state} 2>&1 | wc -l) credential=$(cat {state}/credential 2>&1 | wc -c)"
    " tmp=$(ls -A /tmp | wc -l); touch /tmp/{mark}"
)


async def test_a_gang_runs_as_host_processes_with_the_containers_contract(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    # no container engine anywhere: the control plane pins runtimes without one, and the
    # daemons need none
    cluster = await node_cluster_factory(2, DOCKER_HOST=NO_ENGINE, **PROCESSES)
    cli = await cli_for(cluster, tmp_path)
    state = cluster.daemons["n1"].state_dir
    mark = f"tp-member-mark-{uuid.uuid4().hex}"
    job_id = submit(cli, LOOK.format(state=state, mark=mark), profile="nodes/cpu:1")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "succeeded", (job, cli("job", "logs", job_id, ok=False).stdout)
    for index in range(2):
        log = cli("job", "logs", job_id, "--member", str(index)).stdout
        head, capsule, secrets, hidden = log.strip().splitlines()[-4:]
        assert f"rank={index} world=2 user=tuneplane-member cwd=/workspace gpus=[]" in head, log
        assert capsule == "1"  # the runner checked the Job Capsule, source archive listed
        assert secrets == "0"  # nothing of the daemon's environment reaches the member
        # the state directory is an empty tmpfs the member cannot even list
        credential = int(hidden.split("credential=")[1].split()[0])
        assert hidden.startswith("listed=1 ") and credential < 200, log  # one error line each
        assert hidden.endswith(" tmp=0"), log  # its own /tmp, empty at its start
    assert not exists(f"/tmp/{mark}")  # and not the host's
    assert (state / "credential").exists()  # while the daemon has it


async def test_a_member_outlives_its_daemons_kill_and_is_readopted(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(1, **PROCESSES)
    cli = await cli_for(cluster, tmp_path)
    seen = Path(tempfile.mkdtemp(prefix="tp-go-", dir="/var/tmp"))  # members have their own /tmp
    os.chmod(seen, 0o755)
    go = seen / "go"
    job_id = submit(
        cli,
        f"echo started pid=$$; while [ ! -e {go} ]; do sleep 0.1; done; echo done",
        profile="nodes/cpu:0.5",
    )
    cli.wait_state(job_id, {"running"}, timeout=60)
    daemon = cluster.daemons["n1"]
    [record] = (daemon.state_dir / "processes").glob("*/started.json")
    started = json.loads(record.read_text())
    cluster.kill_daemon("n1", signal.SIGKILL)
    assert runs(started["pid"])  # the member runs on without its daemon
    cluster.start_daemon("n1")
    await asyncio.to_thread(cluster.wait_connected, ["n1"])
    go.touch()
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=60)
    assert job["state"] == "succeeded", job
    log = cli("job", "logs", job_id).stdout
    assert log.count("started pid=") == 1 and "done" in log, log  # re-adopted, never restarted
    assert f"started pid={started['pid']}\n" in log  # the process recorded is the member
    shutil.rmtree(seen)


async def test_a_member_over_its_memory_is_killed_and_named(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(1, **PROCESSES)
    daemon_log = cluster.daemons["n1"].log.read_text()
    limits = re.search(r"limits: (\S+)", daemon_log)
    if limits is None or limits[1] == "none":
        pytest.skip(f"this host offers no cgroup for members' limits: {daemon_log[-300:]}")
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, "head -c 1000000000 /dev/zero | tail", profile="nodes/cpu:0.5")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=90)
    assert job["state"] == "failed"
    assert "OOMKilled" in json.dumps(job), job


async def test_an_h200_job_runs_bound_to_the_uuid_the_node_detected(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    """A host-process node reading a recorded H200 (tests/fixtures/nvml/h200.txt): an `h200:1`
    job runs to its end with exactly that GPU bound, by the UUID the inventory gave."""
    cluster = await node_cluster_factory(0, TUNEPLANE_FAKE_NVML=str(H200), **PROCESSES)
    cluster.gpu_pool()
    cluster.start_daemon("g1")
    await asyncio.to_thread(cluster.wait_connected, ["g1"])
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, 'echo "bound=[$CUDA_VISIBLE_DEVICES]"', "h200:1")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=90)
    assert job["state"] == "succeeded", job
    assert "bound=[GPU-00000000-0000-0000-0000-000000000000]" in cli("job", "logs", job_id).stdout
