"""The node backend end to end: the control plane, the node control gateway (TLS) and four node
daemons, each a real process, running gangs as real containers on the test's engine."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_walkthrough import Cli, hello_workspace, job_id_in
from tests.fixtures.docker import engine_call
from tests.fixtures.nodes import NodeCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Factory = Callable[..., Awaitable[NodeCluster]]
RANKS = "echo rank=$RANK world=$WORLD_SIZE node_rank=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT"


def docker_events(docker_host: str, label: str, since: float) -> list[dict[str, Any]]:
    """Container events of the engine since ``since`` for containers with ``label``."""
    transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
    filters = json.dumps({"type": ["container"], "label": [label]})
    with httpx.Client(transport=transport, base_url="http://engine") as client:
        resp = client.get(
            "/events",
            params={"since": int(since), "until": int(time.time()) + 1, "filters": filters},
        )
    return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


def actions(docker_host: str, attempt_id: str, since: float) -> dict[str, list[str]]:
    """member id → what the engine did to its containers since ``since``, in order."""
    found: dict[str, list[str]] = {}
    for e in docker_events(docker_host, f"tuneplane.attempt={attempt_id}", since):
        found.setdefault(e["Actor"]["Attributes"]["tuneplane.member"], []).append(e["Action"])
    return found


def events(docker_host: str, attempt_id: str, since: float, action: str) -> dict[str, int]:
    """member id → how many times ``action`` happened to its container (members it never
    happened to are left out)."""
    counts = {m: a.count(action) for m, a in actions(docker_host, attempt_id, since).items()}
    return {m: n for m, n in counts.items() if n}


def starts(docker_host: str, attempt_id: str, since: float) -> dict[str, int]:
    """member id → how many times its container started."""
    return events(docker_host, attempt_id, since, "start")


async def cli_for(cluster: NodeCluster, tmp_path: Path) -> Cli:
    return hello_workspace(cluster.servers.url, cluster.servers.token, tmp_path)


def submit(cli: Cli, command: str, profile: str = "nodes/cpu:2") -> str:
    out = cli("submit", "hello", "--profile", profile, "--set", f"command={command}", "--yes")
    return job_id_in(out.stdout)


async def test_a_four_member_gang_runs_to_completion(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(4)
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    job_id = submit(cli, RANKS + "; cat /tuneplane/capsule/SHA256SUMS | grep -c ' source.tar.gz$'")
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    members = attempt["members"]
    assert len(members) == 4 and len({m["node"] for m in members}) == 4
    assert all(m["state"] == "succeeded" for m in members)
    log = cli("job", "logs", job_id).stdout
    port = re.search(r"rank=0 world=4 node_rank=0 master=127\.0\.0\.1:(\d+)", log)
    first, last = os.environ["TUNEPLANE_RENDEZVOUS_PORTS"].split("-")  # tests/fixtures/server.py
    assert port is not None and int(first) <= int(port[1]) <= int(last), log
    assert "\n1\n" in log  # the runner checked the Job Capsule the node put in (source listed)
    assert starts(docker_host, attempt["id"], since) == {m["id"]: 1 for m in members}
    for index in range(4):  # every member's own log, kept after the end (issue 19, item 2)
        own = cli("job", "logs", job_id, "--member", str(index)).stdout
        assert f"rank={index} world=4" in own and own.count("world=") == 1, (index, own)
    refused = cli("job", "logs", job_id, "--member", "4", ok=False)
    assert refused.returncode != 0 and "no member 4: its members are 0 to 3" in refused.stderr


async def test_a_pass_stored_in_groups_admits_every_queued_job_once(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    """With TUNEPLANE_ADMISSION_STORE_GROUPS=2 the leader stores a pass on two connections at
    once (docs/scheduling.md#storing-a-pass-on-several-connections): two one-node jobs queued
    behind a gang that holds the whole fleet are placed by one pass when it ends, each on its
    own node (so in two groups), and each started once."""
    cluster = await node_cluster_factory(2, TUNEPLANE_ADMISSION_STORE_GROUPS="2")
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    blocker = submit(cli, "sleep 12", "nodes/cpu:1")  # above one node's 0.5 CPUs: both nodes
    cli.wait_state(blocker, {"running"}, timeout=60)
    queued = [submit(cli, f"echo job {i}", "nodes/cpu:0.5") for i in range(2)]
    assert {cli.status(j)["state"] for j in queued} == {"pending"}  # the fleet is full
    assert cli.wait_state(blocker, {"succeeded", "failed"}, timeout=60)["state"] == "succeeded"
    jobs = [cli.wait_state(j, {"succeeded", "failed", "cancelled"}, timeout=120) for j in queued]
    assert [j["state"] for j in jobs] == ["succeeded"] * 2, jobs
    nodes = [m["node"] for j in jobs for a in j["attempts"] for m in a["members"]]
    assert sorted(nodes) == sorted(cluster.daemons), nodes  # one attempt each, a node each
    for job in jobs:
        [attempt] = job["attempts"]
        assert starts(docker_host, attempt["id"], since) == {attempt["members"][0]["id"]: 1}
    logs = "".join(p.read_text() for p in cluster.servers.state_dir.glob("serve-*.log"))
    assert "stored 2 placements in 2 groups at once" in logs, logs[-3000:]


async def test_a_rendezvous_port_held_by_a_stranger_is_retried_and_nothing_starts(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    """Member 0's node finds the gang's rendezvous port held by a process TunePlane knows
    nothing of: it votes a *busy* no, the launch is aborted and the job queued again (launch
    retries), never started; with the control plane's only port still held after the retries,
    the job fails naming the port."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cluster = await node_cluster_factory(4, TUNEPLANE_RENDEZVOUS_PORTS=f"{port}-{port}")
        cli = await cli_for(cluster, tmp_path)
        since = time.time() - 1
        job_id = submit(cli, RANKS)
        job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=90)
    assert job["state"] == "failed"
    assert f"refused: rendezvous port {port} is in use" in job["reason"], job
    attempts = job["attempts"]
    assert len(attempts) == 3, attempts  # the first and two launch retries
    assert all(f"rendezvous port {port} is in use" in a["reason"] for a in attempts), attempts
    for attempt in attempts:
        assert starts(docker_host, attempt["id"], since) == {}
    # the envelope is free again: the same gang now runs
    assert cli.wait_state(submit(cli, RANKS), {"succeeded", "failed"}, 120)["state"] == "succeeded"


async def test_a_member_killed_outside_tuneplane_fails_saying_so(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    """Issue 19, item 6: `docker kill` of a member's container on its node, behind TunePlane's
    back, ends the job `failed` with the reason every backend gives such an end."""
    cluster = await node_cluster_factory(1)
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, "sleep 600", "nodes/cpu:0.5")
    job = cli.wait_state(job_id, {"running"}, timeout=120)
    member_id = job["attempts"][0]["members"][0]["id"]
    filters = json.dumps({"label": [f"tuneplane.member={member_id}"]})
    listed = await asyncio.to_thread(
        engine_call, docker_host, "GET", "/containers/json", {"filters": filters}
    )
    [container] = listed.json()
    path = f"/containers/{container['Id']}/kill"  # docker kill
    assert (await asyncio.to_thread(engine_call, docker_host, "POST", path)).status_code == 204
    job = cli.wait_state(job_id, {"failed", "cancelled", "succeeded"}, timeout=120)
    member = job["attempts"][0]["members"][0]
    assert (job["state"], member["state"], member["exit_code"]) == ("failed", "failed", 137)
    reason = "cancelled outside TunePlane: docker kill (SIGKILL)"
    assert (member["reason"], job["reason"]) == (reason, reason)
