"""One contract, every backend: the same 2-member job on local (Docker), node (real daemons over
TLS), Slurm (the real cluster) and Kubernetes (the fake API server), checked against the
capability table of docs/backends.md. A `yes` cell's promise is asserted; a `no` cell's
documented absence is asserted too, so the table cannot claim too much or too little.

Each backend runs four jobs, one after the other, on one control plane: one that writes
TensorBoard and JSONL metrics, an output file and a log line per member; one whose members exit
3; one stopped with `tp job stop`; one ended from outside (`docker kill`, `scancel`, a deleted
pod). Every mismatch with the table is collected, so one run lists them all."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tensorboardX import SummaryWriter

from tests.e2e.test_kubernetes_e2e import DIGEST, ThreadedFake
from tests.e2e.test_slurm_metrics import slurm_with_metrics
from tests.e2e.test_walkthrough import Cli
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import Servers, free_port
from tests.fixtures.slurm import SlurmCluster
from tests.support.capabilities import DOC, Outcome, capabilities, outcomes
from tests.support.parity_rigs import (
    FINAL,
    DockerRig,
    KubeRig,
    Rig,
    SlurmRig,
    Workload,
    expected_series,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS, LINES = 20, 5
Factory = Callable[..., Awaitable[Servers]]


def workload(tmp_path: Path) -> Workload:
    runs = tmp_path / "tb"
    with SummaryWriter(str(runs)) as writer:  # the writer PyTorch users use
        for step in range(STEPS):
            writer.add_scalar("train/loss", 1.0 / (1 + step), step)
    (events,) = runs.glob("*tfevents*")
    lines = "".join(
        json.dumps({"step": s, "metrics": {"eval/acc": s / LINES}}) + "\n" for s in range(LINES)
    )
    return Workload(events.read_bytes(), lines, STEPS, LINES)


def new_cli(servers: Servers, tmp_path: Path, work: Workload, *runtime: str) -> Cli:
    cli = Cli(tmp_path, tmp_path)
    cli("login", "--server", servers.url, "--token", servers.token)
    cli("init", str(tmp_path / "ws"))
    cli.cwd = tmp_path / "ws"
    return add_experiment(cli, work, *runtime)


def add_experiment(cli: Cli, work: Workload, *runtime: str) -> Cli:
    """The experiment ``parity``: its members copy these metric files (Workload.COMMAND)."""
    cli("new", "parity", "--method", "custom/custom", *runtime)
    (cli.cwd / "parity" / "events.bin").write_bytes(work.events)
    (cli.cwd / "parity" / "eval.jsonl").write_text(work.jsonl)
    return cli


# -- the checks ------------------------------------------------------------------------------


class Findings:
    """Every way a backend disagrees with the table; asserted empty at the end."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.table = capabilities()
        self.found: list[str] = []

    def cell(self, capability: str) -> str:
        return self.table[capability][self.backend]

    def check(self, capability: str, ok: bool, detail: str) -> None:
        if not ok:
            self.found.append(
                f"{capability} = {self.cell(capability)} on {self.backend}, but {detail}"
            )


def check_succeeded_job(rig: Rig, job_id: str, work: Workload, f: Findings) -> None:
    job = rig.wait(job_id, FINAL)
    members = job["attempts"][-1]["members"]
    log0 = rig.log(job_id, 0)[1]
    assert job["state"] == "succeeded" and len(members) == 2, (job["reason"], members, log0)
    assert "parity-member-0" in log0 and "parity-done-0" in log0, log0

    summary = rig.json(f"/v1/jobs/{job_id}/metrics")
    if f.cell("metrics") == "yes":  # shipping may trail the job's end: wait, bounded

        def missing() -> str | None:
            return expected_series(rig.json(f"/v1/jobs/{job_id}/metrics"), work)

        with contextlib.suppress(AssertionError):
            wait_for("every point", lambda: missing() is None, 90)
        f.check("metrics", missing() is None, f"not every point arrived: {missing()}")
    else:
        f.check("metrics", "metrics=unset" in log0, f"the member had a metrics dir: {log0!r}")
        f.check("metrics", summary["series"] == [], f"metrics arrived: {summary['series']}")
        out = rig.cli("job", "metrics", job_id)
        said = out.stdout + out.stderr
        f.check("metrics", "no metrics yet" in said, f"tp job metrics said {said!r}")

    if f.cell("durable_spool") != "n/a":
        durable = rig.spool_is_durable()
        f.check("durable_spool", durable == (f.cell("durable_spool") == "yes"),
                f"the spool is {'durable' if durable else 'lost with the member'}")  # fmt: skip

    status, log1 = rig.log(job_id, 1)
    own = status == 200 and "parity-member-1" in log1 and "parity-member-0" not in log1
    if f.cell("member_logs") == "yes":
        f.check("member_logs", own, f"?member=1 after the end answered {status} {log1[:200]!r}")
    else:
        f.check("member_logs", not own, "?member=1 after the end gave member 1's log")

    listed = rig.json(f"/v1/jobs/{job_id}/artifacts")
    artifacts = listed["members"]
    recorded = listed["records_outputs"]  # what the console says of a member without files
    f.check("artifacts", recorded == (f.cell("artifacts") == "yes"), f"records_outputs {recorded}")
    if f.cell("artifacts") == "yes":
        files = {a["member"]: {x["path"]: x["sha256"] for x in a["files"]} for a in artifacts}
        want = {
            i: {f"result-{i}.txt": hashlib.sha256(f"result of member {i}\n".encode()).hexdigest()}
            for i in (0, 1)
        }
        f.check("artifacts", files == want, f"manifests {files}, want {want}")
        verified = rig.cli("artifacts", "verify", job_id, "--json", ok=False)
        f.check("artifacts", verified.returncode == 0 and json.loads(verified.stdout)["ok"],
                f"tp artifacts verify: {verified.stdout}{verified.stderr}")  # fmt: skip
    else:
        f.check("artifacts", "outputs=unset" in log0, f"the member had outputs: {log0!r}")
        f.check("artifacts", artifacts == [], f"artifacts were recorded: {artifacts}")


def matches(job: dict[str, Any], want: Outcome) -> str | None:
    """None when the job ended as ``want`` says; else how it ended."""
    members = [m for m in job["attempts"][-1]["members"] if want.member in (None, m["index"])]
    got = [(m["index"], m["state"], m["exit_code"], m["reason"] or "") for m in members]
    ok = job["state"] == want.job_state and all(
        state == want.member_state
        and (want.exit_code is None or code == want.exit_code)
        and any(fragment in reason for fragment in want.reasons)
        for _, state, code, reason in got
    )
    return None if ok and got else f"job {job['state']}, members (index, state, exit, reason) {got}"


def check_outcome(f: Findings, capability: str, job: dict[str, Any], *wants: Outcome) -> None:
    hows = [how for want in wants if (how := matches(job, want)) is not None]
    if f.cell(capability) == "yes":
        f.check(capability, not hows, f"it ended {hows}; the outcome table says {wants}")
    else:
        f.check(capability, bool(hows), f"it ended as the outcome table says: {wants}")


async def check_parity(rig: Rig, work: Workload) -> None:
    f = Findings(rig.backend)
    ends = outcomes()

    job_id = rig.submit(Workload.COMMAND)
    await asyncio.to_thread(rig.drive, job_id, "ok", work)
    await asyncio.to_thread(check_succeeded_job, rig, job_id, work, f)

    job_id = rig.submit(Workload.FAIL)
    await asyncio.to_thread(rig.drive, job_id, "fail", work)
    job = await asyncio.to_thread(rig.wait, job_id, FINAL)
    check_outcome(f, "failed_exit", job, ends["failed exit"], ends["failed exit: the others"])

    job_id = rig.submit(Workload.SIGNAL)
    await asyncio.to_thread(rig.drive, job_id, "signal", work)
    job = await asyncio.to_thread(rig.wait, job_id, FINAL)
    check_outcome(f, "signal_exit", job, ends["killed by a signal"])

    job_id = rig.submit(Workload.LONG)
    await asyncio.to_thread(rig.drive, job_id, "long", work)
    await asyncio.to_thread(rig.wait, job_id, {"running"})
    rig.cli("job", "stop", job_id)
    job = await asyncio.to_thread(rig.wait, job_id, FINAL)
    check_outcome(f, "stop", job, ends["stop"])

    job_id = rig.submit(Workload.LONG)
    await asyncio.to_thread(rig.drive, job_id, "long", work)
    job = await asyncio.to_thread(rig.wait, job_id, {"running"})
    await asyncio.to_thread(rig.outside_cancel, job)
    job = await asyncio.to_thread(rig.wait, job_id, FINAL)
    check_outcome(f, "outside_cancel", job, ends["outside cancellation"])
    reason = next(m["reason"] for m in job["attempts"][-1]["members"] if m["index"] == 0) or ""
    named = "outside TunePlane" in reason
    f.check("outside_cancel_named", named == (f.cell("outside_cancel_named") == "yes"),
            f"member 0's reason is {reason!r}")  # fmt: skip

    def held() -> dict[str, float]:  # every job ended: nothing may stay reserved
        pools = rig.json("/v1/fleet")["pools"]
        return {n["name"]: n["cpus_used"] for p in pools for n in p["nodes"] if n["cpus_used"]}

    try:
        await asyncio.to_thread(wait_for, "every reservation released", lambda: not held(), 60)
    except AssertionError:
        f.found.append(f"reservations still held on {rig.backend} after every job ended: {held()}")
    assert not f.found, f"{DOC} disagrees with the {rig.backend} backend:\n" + "\n".join(f.found)


# -- one test per backend ----------------------------------------------------------------------

LOCAL_FLEET = """
[[pools]]
name = "local"
backend = "local"
cpus_per_node = 1
memory_mb_per_node = 512
nodes = ["local-0", "local-1"]
"""


async def test_local(api_servers_factory: Factory, docker_host: str, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(LOCAL_FLEET)
    servers = await api_servers_factory(1, TUNEPLANE_FLEET_FILE=str(fleet))
    work = workload(tmp_path)
    cli = new_cli(servers, tmp_path, work)
    await check_parity(DockerRig("local", servers, cli, "local/cpu:2", docker_host), work)


async def test_node(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]], docker_host: str, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(2)
    work = workload(tmp_path)
    cli = new_cli(cluster.servers, tmp_path, work)
    rig = DockerRig("node", cluster.servers, cli, "nodes/cpu:1", docker_host, cluster)
    await check_parity(rig, work)


async def test_slurm(
    api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # the pool is synced; a collector runs with each member, shipping to a telemetry gateway
    async with slurm_with_metrics(api_servers_factory, slurm_cluster, tmp_path) as setup:
        work = workload(tmp_path)
        cli = add_experiment(setup.cli, work)
        rig = SlurmRig("slurm", setup.servers, cli, "debug/cpu:4", slurm_cluster, setup.shared)
        rig.spool_root = tmp_path / "node-local"
        await asyncio.to_thread(slurm_cluster.wait_idle)
        await check_parity(rig, work)


KUBE_FLEET = """
[[pools]]
name = "k8s"
backend = "kubernetes"
cpus_per_node = 1
memory_mb_per_node = 512
nodes = 2
"""
KUBE_CONFIG = """
[kubernetes]
kubeconfig = "{kubeconfig}"
termination_grace_seconds = 5

[kubernetes.collector]
image = "registry.example/tuneplane@{digest}"
gateway = "127.0.0.1:{port}"
ca_configmap = "tuneplane-ca"

[kubernetes.pools.k8s]
namespace = "ml"
queue = "team-a"
"""


async def test_kubernetes(api_servers_factory: Factory, tmp_path: Path) -> None:
    fake = ThreadedFake()
    fake.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": fake.api.url}}],
        "users": [{"name": "tp", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tp"}}],
        "current-context": "fake",
    }))  # fmt: skip
    port = free_port()
    config, fleet = tmp_path / "kubernetes.toml", tmp_path / "fleet.toml"
    config.write_text(KUBE_CONFIG.format(kubeconfig=kubeconfig, digest=DIGEST, port=port))
    fleet.write_text(KUBE_FLEET)
    servers = await api_servers_factory(
        1, TUNEPLANE_KUBERNETES_CONFIG=str(config), TUNEPLANE_FLEET_FILE=str(fleet)
    )
    telemetry = NodeCluster(
        servers,
        0,
        servers.state_dir / "pki" / "ca.pem",
        "k8s",
        dict(servers.env),
        telemetry_port=port,
    )
    rig: KubeRig | None = None
    try:
        await asyncio.to_thread(telemetry.start_telemetry)
        work = workload(tmp_path)
        cli = Cli(tmp_path, tmp_path)
        cli("login", "--server", servers.url, "--token", servers.token)
        cli("runtime", "add", "bb-k8s", "--image", "registry.example/busybox:1.36",
            "--digest", DIGEST)  # fmt: skip
        cli = new_cli(servers, tmp_path, work, "--runtime", "bb-k8s")
        rig = KubeRig("kubernetes", servers, cli, "k8s/cpu:2", fake, telemetry, tmp_path / "pods")
        await check_parity(rig, work)
    finally:
        if rig is not None:
            await asyncio.to_thread(rig.close)
        telemetry.stop_telemetry()
        fake.stop()
