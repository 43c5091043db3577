"""The Slurm backend end to end: `tp serve` with TUNEPLANE_SLURM_URL pointed at the real Slurm
cluster of tests/fixtures/slurm.py (Debian 12's Slurm 22.05, slurmrestd v0.0.38 on a unix
socket); jobs submitted with the real CLI run as Slurm jobs, and their state, exit code and
output come back through `tp job status` and `tp job logs`. See docs/slurm.md."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import JobState
from tests.e2e.test_walkthrough import Cli, job_id_in
from tests.fixtures.server import Servers
from tests.fixtures.slurm import SlurmCluster, slurm_cluster_started
from tests.support import http

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.slurm]  # module clusters too

RANKS = (
    "echo rank=$RANK world=$WORLD_SIZE node_rank=$NODE_RANK local=$LOCAL_RANK"
    " master=$MASTER_ADDR:$MASTER_PORT node=$SLURMD_NODENAME"
)


@dataclass
class Setup:
    servers: Servers
    cli: Cli
    shared: Path
    cluster: SlurmCluster

    def api(self, method: str, path: str, body: Any = None) -> Any:
        resp = http.request(
            method, self.servers.url + path, json=body, headers=self.servers.headers, timeout=30
        )
        assert resp.status_code < 300, resp.text
        return resp.json()

    def submit(self, command: str, profile: str = "debug/cpu:1") -> str:
        out = self.cli(
            "submit", "hello", "--profile", profile, "--set", f"command={command}", "--yes"
        )
        return job_id_in(out.stdout)

    def finished(self, job_id: str, timeout: float = 120) -> dict[str, Any]:
        """Wait for the job to end; its status, with its log when it failed unexpectedly."""
        job = self.cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout)
        job["log"] = self.cli("job", "logs", job_id, ok=False).stdout
        return job

    def slurm_job(self, job_id: str) -> int:
        """The Slurm job id of the job's (last) attempt, as the backend recorded it."""
        attempt = self.cli.status(job_id)["attempts"][-1]["id"]
        deadline = time.monotonic() + 60
        path = self.shared / attempt / "slurm-job-id"
        while not path.exists():
            assert time.monotonic() < deadline, f"no Slurm job for {attempt}"
            time.sleep(0.2)
        return int(path.read_text())

    def squeue(self, *args: str) -> str:
        proc = subprocess.run(
            ["squeue", "-h", *args], env=self.cluster.env(), capture_output=True, text=True
        )
        return proc.stdout.strip()

    def state(self, slurm_id: int) -> str:
        return self.squeue("-j", str(slurm_id), "-t", "all", "-o", "%T")

    def command(self, *args: str) -> str:
        """A Slurm command run outside TunePlane (sbatch, scancel, …) on this cluster."""
        proc = subprocess.run(
            list(args), env=self.cluster.env(), capture_output=True, text=True, check=True
        )
        return proc.stdout.strip()

    def until_state(self, slurm_id: int, state: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.state(slurm_id) != state:
            assert time.monotonic() < deadline, f"{slurm_id}: {self.state(slurm_id)}"
            time.sleep(0.2)

    def jobs_named(self, name: str) -> list[int]:
        return [int(i) for i in self.squeue("-n", name, "-t", "all", "-o", "%i").split()]


Factory = Callable[..., Awaitable[Servers]]


@pytest.fixture
async def slurm(api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path) -> Setup:
    return await setup_for(api_servers_factory, slurm_cluster, tmp_path)


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[SlurmCluster]:
    """Every node declares two GPUs of model "fake" (counted only: deploy/dev/slurm.sh)."""
    with slurm_cluster_started(TUNEPLANE_SLURM_GRES="gpu:fake:2") as cluster:
        yield cluster


async def setup_for(
    api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path, **env: str
) -> Setup:
    shared = tmp_path / "slurm-shared"
    servers = await api_servers_factory(
        1,
        TUNEPLANE_SLURM_URL=f"unix:{slurm_cluster.socket}",
        TUNEPLANE_SLURM_SHARED_DIR=str(shared),
        TUNEPLANE_SLURM_API_VERSION="auto",
        **env,
    )
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", servers.url, "--token", servers.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    cli("new", "hello", "--method", "custom/custom")
    setup = Setup(servers, cli, shared, slurm_cluster)
    deadline = time.monotonic() + 60  # the supervisor's first sweep reads Slurm's capacity
    while not any(p["name"] == "debug" for p in setup.api("GET", "/v1/fleet")["pools"]):
        assert time.monotonic() < deadline, "the Slurm partition never became a pool"
        await asyncio.sleep(0.3)
    return setup


async def test_capacity_cpu_job_and_two_node_process_group(slurm: Setup) -> None:
    [pool] = [p for p in slurm.api("GET", "/v1/fleet")["pools"] if p["name"] == "debug"]
    assert (pool["backend"], pool["cpus_per_node"], pool["memory_mb_per_node"]) == (
        "slurm",
        2,
        2000,
    )
    nodes = {n["name"]: n for n in pool["nodes"]}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert {(n["sched"], n["connectivity"]) for n in nodes.values()} == {
        ("schedulable", "connected")
    }

    job_id = slurm.submit("echo hello from slurm; echo to-stderr >&2; hostname")
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    logs = slurm.cli("job", "logs", job_id).stdout
    assert "hello from slurm" in logs and "to-stderr" in logs
    status = slurm.cli("job", "status", job_id).stdout
    assert "succeeded" in status

    job_id = slurm.submit(RANKS, profile="debug/cpu:4")  # 2 members of a whole node each
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    [attempt] = job["attempts"]
    assert len(attempt["members"]) == 2
    assert all(m["state"] == "succeeded" and m["exit_code"] == 0 for m in attempt["members"])
    log = slurm.cli("job", "logs", job_id).stdout  # member 0's
    assert "rank=0 world=2 node_rank=0 local=0 master=127.0.0.1:" in log, log
    assert not (slurm.shared / attempt["id"]).exists()  # released: only the stored logs are left
    rank1 = slurm.cli("job", "logs", job_id, "--member", "1").stdout  # kept too (issue 19, 2)
    assert "rank=1 world=2 node_rank=1" in rank1 and "rank=0" not in rank1, rank1


async def test_failing_job_decodes_the_exit_code(slurm: Setup) -> None:
    job_id = slurm.submit("echo about to fail; exit 3")
    job = slurm.finished(job_id)
    assert job["state"] == "failed", job
    [member] = job["attempts"][-1]["members"]
    assert member["exit_code"] == 3
    assert member["reason"] == "exited with code 3", member  # as on every backend
    assert "about to fail" in slurm.cli("job", "logs", job_id).stdout


async def test_cancel_ends_the_slurm_job(slurm: Setup) -> None:
    job_id = slurm.submit("echo started; sleep 600")
    slurm.cli.wait_state(job_id, {"running"}, timeout=120)
    slurm_id = slurm.slurm_job(job_id)
    assert slurm.state(slurm_id) == "RUNNING"
    slurm.cli("job", "stop", job_id)
    job = slurm.cli.wait_state(job_id, {"cancelled", "failed", "succeeded"}, timeout=120)
    assert job["state"] == "cancelled", job
    assert slurm.state(slurm_id) in ("CANCELLED", "COMPLETING")


async def test_slurmctld_restarted_mid_job(slurm: Setup) -> None:
    job_id = slurm.submit("echo before; sleep 8; echo after")
    slurm.cli.wait_state(job_id, {"running"}, timeout=120)
    slurm_id = slurm.slurm_job(job_id)
    await asyncio.to_thread(slurm.cluster.stop_daemon, "slurmctld")
    try:
        await asyncio.sleep(3)  # the supervisor polls while slurmctld is away
        job = slurm.cli.status(job_id)
        assert job["state"] in ("running", "starting"), job
    finally:  # restarted without -c: it recovers its jobs from the state directory
        await asyncio.to_thread(slurm.cluster.start_slurmctld)
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    attempt = job["attempts"][-1]["id"]
    assert slurm.jobs_named(f"tp-{attempt}") == [slurm_id]  # the same job, not a resubmission
    log = slurm.cli("job", "logs", job_id).stdout
    assert "before" in log and "after" in log


async def test_slurmrestd_down_at_submit_is_a_clear_error(slurm: Setup) -> None:
    await asyncio.to_thread(slurm.cluster.stop_daemon, "slurmrestd")
    try:
        out = slurm.cli(
            "submit", "hello", "--profile", "debug/cpu:1", "--set", "command=true", "--yes",
            ok=False,
        )  # fmt: skip
        assert out.returncode != 0
        assert "slurmrestd" in out.stderr + out.stdout and "cannot be reached" in (
            out.stderr + out.stdout
        ), out
        jobs = slurm.api("GET", "/v1/jobs")["jobs"]
        assert jobs == []  # nothing committed, nothing reserved
    finally:
        await asyncio.to_thread(slurm.cluster.start_slurmrestd)
    job = slurm.finished(slurm.submit("echo back"))
    assert job["state"] == "succeeded", (job["log"], job["reason"])


def member_when(
    slurm: Setup, job_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 120
) -> dict[str, Any]:
    """Member 0 of the job's latest attempt once ``check`` holds for it, as `tp job status
    --json` reads it (polled in this process: ``Cli.wait_state``)."""
    member: dict[str, Any] = {}

    def matched(job: dict[str, Any]) -> bool:
        nonlocal member
        member = job["attempts"][-1]["members"][0] if job["attempts"] else {}
        return bool(member) and check(member)

    try:
        slurm.cli.wait_state(job_id, {str(s) for s in JobState}, timeout, also=matched)
    except AssertionError:
        raise AssertionError(f"member of {job_id} never matched: {member}") from None
    return member


async def test_a_pending_member_shows_slurms_reason_and_never_a_stale_one(slurm: Setup) -> None:
    """Issue 19, items 3 and 4: a member whose Slurm job pends (every node taken by a job
    submitted outside TunePlane) shows Slurm's pending reason, in `tp job status` and
    `tp job why`; while slurmrestd is away it is unknown with why, and once it answers the
    member is starting with Slurm's reason again (it stayed "Slurm does not answer"); once it
    runs and succeeds, no reason is left."""
    blocker = slurm.command(
        "sbatch", "-N4", "--exclusive", "-p", "debug", "-o", "/dev/null", "-J", "outside",
        "--wrap", "sleep 600",
    ).split()[-1]  # fmt: skip
    try:
        slurm.until_state(int(blocker), "RUNNING")
        job_id = slurm.submit("echo ran")
        pending = re.compile(r"Slurm job \d+ pending: (Resources|Priority)")
        member = member_when(slurm, job_id, lambda m: bool(pending.fullmatch(m["reason"])))
        assert member["state"] == "starting", member
        why = slurm.cli("job", "why", job_id).stdout
        assert f"member 0 waits to start: {member['reason']}" in why, why
        await asyncio.to_thread(slurm.cluster.stop_daemon, "slurmrestd")
        try:
            away = member_when(slurm, job_id, lambda m: m["state"] == "unknown")
            assert away["reason"].startswith("Slurm does not answer"), away
        finally:
            await asyncio.to_thread(slurm.cluster.start_slurmrestd)
        back = member_when(slurm, job_id, lambda m: m["state"] != "unknown")
        assert back["state"] == "starting" and pending.fullmatch(back["reason"]), back
    finally:
        slurm.command("scancel", blocker)
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    [member] = job["attempts"][-1]["members"]
    assert (member["reason"], job["reason"]) == ("", "")


async def test_scancel_outside_tuneplane_fails_the_job_saying_so(slurm: Setup) -> None:
    """Issue 19, item 6: `scancel` behind TunePlane's back ends the job `failed` (a
    `tp job stop` ends it `cancelled`), with the reason every backend gives such an end."""
    job_id = slurm.submit("echo started; sleep 600")
    slurm.cli.wait_state(job_id, {"running"}, timeout=120)
    slurm_id = slurm.slurm_job(job_id)
    slurm.command("scancel", str(slurm_id))
    job = slurm.finished(job_id)
    [member] = job["attempts"][-1]["members"]
    assert (job["state"], member["state"], member["exit_code"]) == ("failed", "failed", 143)
    expected = (
        "cancelled outside TunePlane: scancel or a Slurm operator; "
        f"Slurm reports job {slurm_id} CANCELLED"
    )
    assert member["reason"].startswith(expected), member
    assert job["reason"] == member["reason"]


async def test_gpu_pool_from_gres_and_a_gpu_job(
    api_servers_factory: Factory, gpu_cluster: SlurmCluster, tmp_path: Path
) -> None:
    slurm = await setup_for(api_servers_factory, gpu_cluster, tmp_path)
    [pool] = [p for p in slurm.api("GET", "/v1/fleet")["pools"] if p["name"] == "debug"]
    assert (pool["gpus_per_node"], pool["gpu_model"]) == (2, "fake")
    # the job runs until the test has seen it in Slurm (a fixed sleep ended first under load,
    # and an ended attempt's directory, with the Slurm job id in it, is gone)
    go = slurm.shared / "go-gpu"
    wait = f"for i in $(seq 600); do [ -e {go} ] && break; sleep 0.2; done"
    job_id = slurm.submit(f"echo nproc=$NPROC_PER_NODE; {wait}", profile="debug/fake:2")
    slurm.cli.wait_state(job_id, {"running"}, timeout=120)
    slurm_id = slurm.slurm_job(job_id)
    assert "gpu:2" in slurm.squeue("-j", str(slurm_id), "-o", "%b")  # GRES asked of Slurm
    go.touch()
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    assert "nproc=2" in job["log"]


@pytest.fixture(scope="module")
def split_cluster() -> Iterator[SlurmCluster]:
    """Two partitions: debug (n1, n2) and extra (n3, n4)."""
    with slurm_cluster_started(TUNEPLANE_SLURM_SPLIT="1") as cluster:
        yield cluster


async def test_roles_on_two_pools_run_as_one_heterogeneous_slurm_job(
    api_servers_factory: Factory, split_cluster: SlurmCluster, tmp_path: Path
) -> None:
    slurm = await setup_for(api_servers_factory, split_cluster, tmp_path)
    deadline = time.monotonic() + 60
    while not any(p["name"] == "extra" for p in slurm.api("GET", "/v1/fleet")["pools"]):
        assert time.monotonic() < deadline, "the second partition never became a pool"
        await asyncio.sleep(0.3)
    out = slurm.cli(
        "submit", "hello", "--profile", "head=debug/cpu:1", "--profile", "workers=extra/cpu:4",
        "--set", f"command={RANKS}", "--yes",
    )  # fmt: skip
    job_id = job_id_in(out.stdout)
    job = slurm.finished(job_id, timeout=180)
    assert job["state"] == "succeeded", (job["log"], job["reason"])
    members = job["attempts"][-1]["members"]
    assert [m["role"] for m in members] == ["head", "workers", "workers"]
    assert "rank=0 world=3" in job["log"]
    assert job["log"].rsplit("node=", 1)[1].split()[0] in ("n1", "n2")  # the head on debug
