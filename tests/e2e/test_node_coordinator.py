"""The gang coordinator (inside `tp serve`) killed with SIGKILL at the two moments that matter,
with real processes: between Prepare and the decision, and just after the decision.

Killed undecided: the next coordinator presumes abort: nothing of that attempt starts, its
prepared containers are removed, and a new attempt runs. Killed decided: every member starts
exactly once (the gateway, also killed, re-sends Commit after its restart; nodes obey it once).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import asyncpg
import pytest

from tests.e2e.test_node_backend import Factory, actions, cli_for, starts, submit
from tests.fixtures.nodes import NodeCluster
from tests.fixtures.server import TP, _wait_ready
from tests.support.db import plain_dsn

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAIR = "nodes/cpu:1"  # a gang of two whole nodes


async def query(cluster: NodeCluster, sql: str, *args: object) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        return [dict(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def poll(check: Callable[[], Any], what: str, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def kill_server(cluster: NodeCluster) -> None:
    proc = cluster.servers.procs[0]
    proc.send_signal(signal.SIGKILL)
    proc.wait(15)


def start_server(cluster: NodeCluster) -> None:
    url = cluster.servers.url
    log = cluster.servers.state_dir / "serve-restarted.log"
    proc = subprocess.Popen(
        [TP, "serve", "--port", str(urlparse(url).port)],
        env=cluster.servers.env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    cluster.servers.procs[0] = proc
    _wait_ready(url, proc, log)


async def test_coordinator_killed_before_the_decision_presumes_abort(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    # 5 s heartbeats: a stopped daemon stays "connected" for 15 s, long enough to be asked
    cluster = await node_cluster_factory(2, TUNEPLANE_HEARTBEAT_SECONDS="5")
    cli = await cli_for(cluster, tmp_path)
    daemon = cluster.daemons["n2"].proc
    assert daemon is not None
    daemon.send_signal(signal.SIGSTOP)  # n2 will not vote
    since = time.time() - 1
    try:
        job_id = submit(cli, "echo rank $RANK ran", PAIR)
        voted = await poll(
            lambda: query(
                cluster,
                "SELECT attempt_id FROM member_launches WHERE node = 'n1' AND vote IS TRUE",
            ),
            "n1 to prepare and vote yes",
        )
        kill_server(cluster)  # the coordinator dies with one yes and one silence
        first = voted[0]["attempt_id"]
        [plan] = await query(cluster, "SELECT decision FROM launches WHERE attempt_id = $1", first)
        assert plan["decision"] is None  # undecided when it died
    finally:
        daemon.send_signal(signal.SIGCONT)
    await asyncio.to_thread(start_server, cluster)
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 120)
    assert job["state"] == "succeeded", job
    [aborted, ran] = job["attempts"]
    assert aborted["id"] == first and aborted["state"] != "succeeded"
    [plan] = await query(cluster, "SELECT decision FROM launches WHERE attempt_id = $1", first)
    assert plan["decision"] == "abort"  # presumed abort, recorded
    assert starts(docker_host, first, since) == {}  # nothing of it ever started
    done = actions(docker_host, first, since)
    assert done and all("destroy" in a for a in done.values()), done  # none left behind
    assert starts(docker_host, ran["id"], since) == {m["id"]: 1 for m in ran["members"]}


async def test_coordinator_and_gateway_killed_after_the_decision_start_each_member_once(
    node_cluster_factory: Factory, docker_host: str, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(2)
    cli = await cli_for(cluster, tmp_path)
    since = time.time() - 1
    job_id = submit(cli, "echo rank $RANK ran", PAIR)
    decided = await poll(
        lambda: query(cluster, "SELECT attempt_id FROM launches WHERE decision = 'commit'"),
        "the commit decision",
    )
    kill_server(cluster)
    cluster.stop_gateway(signal.SIGKILL)
    await asyncio.sleep(1)
    await asyncio.to_thread(cluster.start_gateway)
    await asyncio.to_thread(start_server, cluster)
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 120)
    assert job["state"] == "succeeded", job
    [attempt] = job["attempts"]
    assert attempt["id"] == decided[0]["attempt_id"]
    assert starts(docker_host, attempt["id"], since) == {m["id"]: 1 for m in attempt["members"]}
    # a member that exited while the gateway was down is told by the daemon's Hello, its exit
    # held until its final log is stored: the log is there once the job reads ended
    # (docs/node-backend.md#logs)
    log = cli("job", "logs", job_id).stdout
    assert "rank 0 ran" in log
