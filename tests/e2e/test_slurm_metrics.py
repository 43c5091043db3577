"""Metrics on the real Slurm cluster: `tp serve` with a Slurm backend told where the telemetry
gateway is (TUNEPLANE_SLURM_TELEMETRY_GATEWAY, its CA), the telemetry gateway (`tp gateway
telemetry`) beside it. Jobs write TensorBoard events (tensorboardX's SummaryWriter at
``$TUNEPLANE_METRICS_DIR``, as docs/telemetry.md tells users) and JSONL (the SDK); each member's
collector, started by its `member.sh` on the Slurm node, ships them over TLS with its
member-scoped token, and they come back through the API and `tp job metrics`. No collector
outlives the job. See docs/slurm.md, "Metrics"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import jwt
import pytest
from grpclib import Status
from grpclib.client import Channel

from adapters.grpc.telemetry_client import open_channel
from domain.telemetry import MemberScope
from proto import telemetry_pb2 as pb
from proto.telemetry_grpc import TelemetryStub
from tests.e2e.test_slurm_backend import Factory, Setup, setup_for
from tests.e2e.test_telemetry_e2e import wait_for
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import free_port
from tests.fixtures.slurm import SlurmCluster
from tests.integration.test_telemetry_gateway import batch, refused

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PERMISSION_DENIED = Status.PERMISSION_DENIED

STEPS = 50
TRAIN = f"""
import os, sys
from tensorboardX import SummaryWriter
from adapters.sdk import report

rank = int(os.environ["RANK"])
with SummaryWriter(os.environ["TUNEPLANE_METRICS_DIR"]) as writer:
    for step in range({STEPS}):
        writer.add_scalar("train/loss", 1.0 / (1 + step) + rank, step)
report.configure(all_ranks=True)
for step in range(10):
    report.log({{"eval/acc": step / 10}}, step=step)
print("wrote", rank, os.environ["TUNEPLANE_METRICS_DIR"], flush=True)
if sys.argv[1:] == ["die"]:
    os.kill(os.getpid(), 9)  # the training is killed: what it wrote still ships
"""


class MetricsSetup(Setup):
    telemetry: NodeCluster  # only its telemetry gateway is used

    def counts(self, job_id: str) -> dict[tuple[int, str], int]:
        s = self.api("GET", f"/v1/jobs/{job_id}/metrics")
        return {(x["member"], x["tag"]): x["count"] for x in s["series"]}


@contextlib.asynccontextmanager
async def slurm_with_metrics(
    api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path, **env: str
) -> AsyncIterator[MetricsSetup]:
    """`tp serve` with the Slurm backend and its collectors' settings (and ``env``), and the
    telemetry gateway beside it (its dev CA in the servers' state directory, made when it
    starts, before any launch reads it); the experiment `hello` holds TRAIN as train.py. For
    other suites too (the backend parity suite, post-training on Slurm)."""
    port = free_port()
    base = await setup_for(
        api_servers_factory,
        slurm_cluster,
        tmp_path,
        TUNEPLANE_SLURM_TELEMETRY_GATEWAY=f"127.0.0.1:{port}",
        TUNEPLANE_SLURM_TELEMETRY_CA=str(tmp_path / "state" / "pki" / "ca.pem"),
        TUNEPLANE_SLURM_COLLECTOR_SPOOL=str(tmp_path / "node-local"),
        **env,
    )
    setup = MetricsSetup(base.servers, base.cli, base.shared, base.cluster)
    servers = base.servers
    setup.telemetry = NodeCluster(servers, 0, servers.state_dir / "pki" / "ca.pem", "debug", {})
    setup.telemetry.env = dict(servers.env, PYTHONUNBUFFERED="1")
    setup.telemetry.telemetry_port = port
    try:
        await asyncio.to_thread(setup.telemetry.start_telemetry)
        (setup.cli.cwd / "hello" / "train.py").write_text(TRAIN)
        yield setup
    finally:
        await asyncio.to_thread(setup.telemetry.close)


@pytest.fixture
async def slurm(
    api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path
) -> AsyncIterator[MetricsSetup]:
    async with slurm_with_metrics(api_servers_factory, slurm_cluster, tmp_path) as setup:
        yield setup


def left_on_nodes(attempt_id: str) -> str:
    """Processes whose command line names the attempt (its member.sh, its collectors)."""
    found = subprocess.run(["pgrep", "-af", attempt_id], capture_output=True, text=True)
    return found.stdout.strip()


async def send(channel: Channel, token: str, scope: MemberScope) -> pb.Ack:
    """One batch of three points for ``scope`` with ``token`` (as a collector sends it)."""
    stub = TelemetryStub(channel)
    async with stub.Append.open(metadata={"authorization": f"Bearer {token}"}) as stream:
        await stream.send_message(batch(scope, range(3)), end=True)
        ack = await stream.recv_message()
        assert ack is not None
        return ack


def member_tokens(shared: Path, attempt_id: str, into: dict[str, str]) -> None:
    for path in (shared / attempt_id).glob("collector-*/*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            into[path.parent.name] = json.loads(path.read_text())["token"]


async def test_both_members_metrics_arrive_and_no_collector_outlives_the_job(
    slurm: MetricsSetup, tmp_path: Path
) -> None:
    command = f"env | grep -c eyJ; {sys.executable} train.py"
    job_id = slurm.submit(command, profile="debug/cpu:4")  # 2 members, a node each
    attempt_id = ""
    tokens: dict[str, str] = {}
    deadline = time.monotonic() + 180
    while (job := slurm.cli.status(job_id))["state"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, job
        if job["attempts"]:
            attempt_id = job["attempts"][-1]["id"]
            member_tokens(slurm.shared, attempt_id, tokens)
        await asyncio.sleep(0.3)
    log = slurm.cli("job", "logs", job_id, ok=False).stdout
    assert job["state"] == "succeeded", (job, log)
    assert log.splitlines()[0] == "0", log  # no collector token in the workload's environment
    attempt = job["attempts"][-1]
    want = {(i, tag): n for i in (0, 1) for tag, n in (("train/loss", STEPS), ("eval/acc", 10))}
    wait_for(lambda: slurm.counts(job_id) == want, 60, "both members' points")
    out = slurm.cli("job", "metrics", job_id).stdout
    assert "train/loss" in out and str(STEPS - 1) in out, out
    # each member's collector held a token for that member only (the gateway refuses any
    # other scope: tests/integration/test_telemetry_gateway.py)
    assert set(tokens) == {"collector-0", "collector-1"}, tokens
    members = {m["index"]: m["id"] for m in attempt["members"]}
    for rank in (0, 1):
        claims = jwt.decode(tokens[f"collector-{rank}"], options={"verify_signature": False})
        assert (claims["sub"], claims["idx"], claims["attempt"]) == (
            members[rank],
            rank,
            attempt["id"],
        )
    # through the real gateway: member 0's token ships nothing for member 1, only for itself
    ca = slurm.servers.state_dir / "pki" / "ca.pem"
    channel = open_channel("127.0.0.1", slurm.telemetry.telemetry_port, ca)
    try:
        own = MemberScope(job_id, attempt["id"], members[0], 0)
        other = MemberScope(job_id, attempt["id"], members[1], 1)
        assert await refused(send(channel, tokens["collector-0"], other)) == PERMISSION_DENIED
        ack = await send(channel, tokens["collector-0"], own)
        assert ack.accepted + ack.duplicates == 3
    finally:
        channel.close()
    # the allocation ended: nothing of the job runs on the nodes, the local spools are gone
    assert left_on_nodes(attempt["id"]) == ""
    assert not list((tmp_path / "node-local").glob(f"tp-{attempt['id']}-*"))


async def test_gateway_down_while_the_killed_training_ends_ships_when_back(
    slurm: MetricsSetup,
) -> None:
    """The telemetry gateway is down for the whole run; the training is killed (SIGKILL) after
    writing. The member waits (up to its drain bound) with the points in its spool; the gateway
    comes back and they arrive; the job then fails with the training's 137."""
    await asyncio.to_thread(slurm.telemetry.stop_telemetry)
    job_id = slurm.submit(f"{sys.executable} train.py die")
    slurm.cli.wait_state(job_id, {"running", "failed", "succeeded"}, timeout=120)
    attempt_id = slurm.cli.status(job_id)["attempts"][-1]["id"]
    exit_file = slurm.shared / attempt_id / "member-0.exit"
    wait_for(exit_file.exists, 120, "the training to end")
    assert exit_file.read_text().strip() == "137"
    assert slurm.cli.status(job_id)["state"] == "running"  # held for its collector
    await asyncio.to_thread(slurm.telemetry.start_telemetry)
    job = slurm.finished(job_id)
    assert job["state"] == "failed" and job["attempts"][-1]["members"][0]["exit_code"] == 137, job
    want = {(0, "train/loss"): STEPS, (0, "eval/acc"): 10}
    wait_for(lambda: slurm.counts(job_id) == want, 60, "the points written before the kill")
    assert "did not ship" not in job["log"], job["log"]
    assert left_on_nodes(attempt_id) == ""


async def test_points_arrive_while_it_runs_and_a_stop_leaves_nothing(slurm: MetricsSetup) -> None:
    command = f"{sys.executable} train.py && echo trained && sleep 600"
    job_id = slurm.submit(command)
    want = {(0, "train/loss"): STEPS, (0, "eval/acc"): 10}
    wait_for(lambda: slurm.counts(job_id) == want, 120, "the points, while the job runs")
    assert slurm.cli.status(job_id)["state"] == "running"
    attempt_id = slurm.cli.status(job_id)["attempts"][-1]["id"]
    slurm.cli("job", "stop", job_id)
    job = slurm.finished(job_id)
    assert job["state"] == "cancelled", job
    # Slurm's SIGTERM reached every process of the job; the collector (--ignore-term) ran on
    # until its wrapper saw it drained, within Slurm's KillWait
    assert "trained" in job["log"] and "tuneplane-slurm: the metrics" not in job["log"], job["log"]
    assert left_on_nodes(attempt_id) == ""
