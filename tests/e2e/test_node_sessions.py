"""Control sessions with real processes: a node daemon keeps reconnecting whatever breaks its
stream (issue 18, defect 2), and a copy of a connected node's credential file opens no second
session (defect 3).

What must hold: only a credential refused for good ends a daemon; a node has one live session
at a time, a second one is refused and recorded as a security event, and the node's address,
session and running members are untouched by it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from grpclib.const import Status

from tests.e2e.test_node_backend import Factory, cli_for, events, starts, submit
from tests.fixtures.nodes import NODE_CPUS, NODE_MEMORY_MB, NodeCluster
from tests.fixtures.server import TP
from tests.support.faulty_gateway import GRPC_MODES, H2_MODES, TCP_MODES, FaultyFront
from tests.support.node_fault_steps import installation_of, wait_members

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAIR = "nodes/cpu:1"  # above one node's 0.5 CPUs: a gang of two whole nodes
STATUSES = [f"status:{s.name}" for s in Status if s not in (Status.OK, Status.UNAUTHENTICATED)]
FAULTS = [*GRPC_MODES, *STATUSES, *TCP_MODES, *H2_MODES]


async def until(ok: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def link(cluster: NodeCluster, node: str) -> dict[str, Any]:
    links = {a["node"]: a for a in cluster.api("GET", "/v1/node-links")}
    return links[node]  # type: ignore[no-any-return]


async def test_the_daemon_survives_every_broken_stream_and_reconnects(
    node_cluster_factory: Factory,
) -> None:
    """The daemon's stream goes through a front door that breaks each new stream in one way:
    the gateway ends it (a takeover), resets it, answers every gRPC status but UNAUTHENTICATED,
    sends a message it cannot read, garbage, half a message, GOAWAY; TCP resets, FINs, a
    non-TLS answer. After each the daemon is alive and connects again (two attempts per
    fault); then it reaches the real gateway again. UNAUTHENTICATED alone ends it, with exit
    code 5."""
    cluster = await node_cluster_factory(0, TUNEPLANE_NODE_RETRY_MAX_SECONDS="0.5")
    installation = await installation_of(cluster)  # a takeover's Welcome names it too
    front = FaultyFront(cluster.gateway_port, cluster.servers.state_dir / "pki", installation)
    await front.start()
    try:
        daemon = cluster.start_daemon("n1", port=front.port)
        await asyncio.to_thread(cluster.wait_connected, ["n1"])
        first = link(cluster, "n1")["connected_at"]
        killed: dict[str, str] = {}
        for mode in FAULTS:
            front.mode = mode
            front.cut()  # what is still open dies; the next stream meets the fault
            proc = daemon.proc
            assert proc is not None

            def done(mode: str = mode, proc: subprocess.Popen[bytes] = proc) -> bool:
                # the second attempt under a fault shows the daemon survived the first
                return front.attempts[mode] >= 2 or proc.poll() is not None

            await until(done, 60, f"two connection attempts under {mode}")
            if proc.poll() is not None:  # it died: note why, start it again for the next fault
                killed[mode] = daemon.log.read_text().strip().splitlines()[-1]
                front.mode = "forward"
                daemon = cluster.start_daemon("n1", port=front.port)
        assert killed == {}, "the daemon died on these faults:\n" + json.dumps(killed, indent=1)
        front.mode = "forward"
        front.cut()
        await until(
            lambda: (
                link(cluster, "n1")["connected_at"] != first
                and cluster.nodes()["n1"]["connectivity"] == "connected"
            ),
            60,
            "n1 to connect to the real gateway again",
        )
        log = daemon.log.read_text()
        assert "Traceback" not in log
        assert "reconnecting in" in log
        front.mode = "status:UNAUTHENTICATED"  # a credential refused for good ends it
        front.cut()
        proc = daemon.proc
        assert proc is not None
        assert await asyncio.to_thread(proc.wait, 60) == 5
        assert "error: the gateway refused this node's credential" in daemon.log.read_text()
        assert "fix: " in daemon.log.read_text()
    finally:
        await front.close()


def start_impostor(cluster: NodeCluster, state_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """``tp node run`` with a copy of n1's credential file (another state directory, another
    advertised address), as someone who copied the file would start it."""
    state_dir.mkdir()
    shutil.copy(cluster.daemons["n1"].state_dir / "credential", state_dir / "credential")
    args = [
        TP, "node", "run",
        "--server", f"127.0.0.1:{cluster.gateway_port}",
        "--ca", str(cluster.ca),
        "--state-dir", str(state_dir),
        "--advertise-address", "10.66.66.66",
        "--cpus", str(NODE_CPUS),
        "--memory-mb", str(NODE_MEMORY_MB),
        "--telemetry-gateway", "off",
    ]  # fmt: skip
    env = dict(cluster.env, TUNEPLANE_NODE_RETRY_MAX_SECONDS="0.5")
    return subprocess.Popen(args, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def refusals(cluster: NodeCluster) -> int:
    found = cluster.api("GET", "/v1/nodes/n1/events")
    return sum(e["count"] for e in found if e["kind"] == "session-refused")


async def test_a_copied_credential_opens_no_second_session(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(2)
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    job_id = submit(cli, "sleep 600", PAIR)
    job = await wait_members(cluster, job_id, "running")
    [attempt] = job["attempts"]
    before = await asyncio.to_thread(link, cluster, "n1")
    log = tmp_path / "impostor.log"
    impostor = start_impostor(cluster, tmp_path / "impostor", log)
    try:
        await until(
            lambda: (
                refusals(cluster) >= 3
                or link(cluster, "n1")["address"] != "127.0.0.1"
                or impostor.poll() is not None
            ),
            60,
            "the impostor to be refused three times",
        )
        after = await asyncio.to_thread(link, cluster, "n1")
        assert after["address"] == "127.0.0.1", after  # the address MASTER_ADDR comes from
        assert after["connected_at"] == before["connected_at"]  # the real session, untouched
        assert impostor.poll() is None  # refused, it keeps trying (with back-off)
        text = log.read_text()
        assert "Traceback" not in text
        assert text.count("already has a live control session") == 1  # logged once
        assert "since " in text and "from 127.0.0.1" in text  # names the live session
        assert "stop the other daemon" in text  # and the fix
        listed = json.loads(cli("node", "events", "n1", "--json").stdout)
    finally:
        impostor.send_signal(signal.SIGTERM)
        impostor.wait(15)
    [event] = listed  # coalesced: one row however often it retried
    assert event["kind"] == "session-refused" and event["count"] >= 3, event
    assert event["source"] == "127.0.0.1" and "10.66.66.66" in event["message"], event
    table = cli("node", "events", "n1").stdout
    assert "session-refused" in table and "10.66.66.66" in table
    job = await wait_members(cluster, job_id, "running")  # the real daemon kept its members
    assert job["state"] == "running"
    nodes = await asyncio.to_thread(cluster.nodes)
    assert nodes["n1"]["connectivity"] == "connected"
    assert events(docker_host, attempt["id"], since, "die") == {}
    assert "already has a live control session" not in cluster.daemons["n1"].log.read_text()
    # kill -9 of the real daemon and a quick restart: it gets in at once (its old stream closed)
    cluster.kill_daemon("n1", signal.SIGKILL)
    cluster.start_daemon("n1")
    await until(
        lambda: link(cluster, "n1")["connected_at"] != before["connected_at"],
        60,
        "n1 to reconnect after kill -9",
    )
    job = await wait_members(cluster, job_id, "running")
    cli("job", "stop", job_id)
    job = await asyncio.to_thread(cli.wait_state, job_id, {"cancelled", "failed"}, 60)
    assert job["state"] == "cancelled", job
    assert starts(docker_host, attempt["id"], since) == {m["id"]: 1 for m in attempt["members"]}
