"""Recovery time on the node backend after a node is fenced (issue 22; not part of the suite).

A real cluster on loopback (`tp serve`, `tp gateway node` over TLS, `tp node run` daemons, one
engine, 1 s heartbeats). Each round runs a 2-member gang with a retry policy that retries a lost
node at once (`[retry] max_attempts = 2, on = ["node-lost"], backoff_seconds = 0`: the backoff is
the user's choice, not the platform's cost). Once both members run, one member's node is fenced
(`POST /v1/nodes/NAME/lost`, what `tp node fence` sends): the fence fails that member and marks
the attempt `node-lost`, the supervisor stops the other member (its command exits on SIGTERM), the
attempt ends, the job goes back to pending, the scheduler reserves the whole envelope again on
the nodes left, and the two-phase launch starts the new attempt's members. Measured: from the
fence request to the engine's `start` event of the new attempt's last member; phases from the
database. A fenced node stays lost, so each round uses up one node: rounds + 1 (warm-up) + 2
daemons. Baseline in the same run: creating and starting one container of the same image straight
through the Docker Engine API, which the new attempt pays at least once.

With ``BENCH_CHECKPOINT_MB=N`` each member first writes a complete checkpoint of N MiB (random
bytes) into its TUNEPLANE_CHECKPOINT_DIR, and the fence waits until one is kept through the
gateway: the new attempt's nodes then fetch and verify it before they vote (in
"prepare+decide"), so the total is the recovery of a job that resumes.

Run: ``.venv/bin/pytest tests/bench/bench_recovery.py -m bench -s`` (``BENCH_ROUNDS=N`` for
another count than 10), with the engine from ``deploy/dev/dockerd.sh`` in DOCKER_HOST.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.bench.bench_gang_launch import baseline, print_phases
from tests.e2e.test_node_backend import cli_for, docker_events
from tests.fixtures.nodes import NodeCluster
from tests.support.db import plain_dsn

pytestmark = pytest.mark.bench

ROUNDS = 10
# exits at once on SIGTERM (sh as a container's first process ignores it without a trap)
COMMAND = "trap 'exit 143' TERM; sleep 600 & wait"


async def phases(cluster: NodeCluster, first: str, second: str) -> dict[str, float]:
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        row = await conn.fetchrow(
            "SELECT extract(epoch FROM a1.updated_at) AS ended, "
            "extract(epoch FROM a2.created_at) AS reserved, "
            "extract(epoch FROM l.began_at) AS began, "
            "extract(epoch FROM l.decided_at) AS decided "
            "FROM attempts a1, attempts a2 JOIN launches l ON l.attempt_id = a2.id "
            "WHERE a1.id = $1 AND a2.id = $2",
            first,
            second,
        )
    finally:
        await conn.close()
    assert row is not None
    return {k: float(row[k]) for k in ("ended", "reserved", "began", "decided")}


def command(checkpoint_mb: int) -> str:
    if not checkpoint_mb:
        return COMMAND
    save = '"$TUNEPLANE_CHECKPOINT_DIR/checkpoint-1"'
    return (
        f"mkdir -p {save} && dd if=/dev/urandom of={save}/w.bin bs=1048576 "
        f"count={checkpoint_mb} 2>/dev/null && "
        f"echo 1 > {save}/COMPLETE; {COMMAND}"
    )


async def kept(cluster: NodeCluster, job_id: str) -> int:
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM checkpoints WHERE job_id = $1", job_id)
        )
    finally:
        await conn.close()


async def until(api: httpx.AsyncClient, url: str, ok: Callable[[dict[str, Any]], bool]) -> Any:
    deadline = time.monotonic() + 120
    while True:
        job = (await api.get(url)).json()
        if ok(job):
            return job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.05)


async def test_recovery_after_a_fence(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
    docker_host: str,
    tmp_path: Path,
) -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", ROUNDS))
    checkpoint_mb = int(os.environ.get("BENCH_CHECKPOINT_MB", "0"))
    cluster = await node_cluster_factory(rounds + 3)
    await cli_for(cluster, tmp_path)  # the experiment `hello` exists in a workspace
    base_url = cluster.servers.url
    retry = {"max_attempts": 2, "on": ["node-lost"], "backoff_seconds": 0}
    rows: list[dict[str, float]] = []
    image = ""
    async with httpx.AsyncClient(headers=cluster.servers.headers, timeout=60) as api:
        for i in range(rounds + 1):  # the first round warms caches and is not counted
            intent = {
                "experiment": "hello",
                "method": "custom/custom",
                "profile": "nodes/cpu:1",  # 2 members of 0.5 CPU: one per node
                "params": {"command": f"{command(checkpoint_mb)} # {i}"},
                "retry": retry,
            }
            r = await api.post(f"{base_url}/v1/previews", json=intent)
            r.raise_for_status()
            p = r.json()
            body = {"preview_id": p["id"], "digest": p["digest"], "retry_key": str(uuid.uuid4())}
            r = await api.post(f"{base_url}/v1/jobs", json=body)
            r.raise_for_status()
            job_id = r.json()["job_id"]
            url = f"{base_url}/v1/jobs/{job_id}"
            job = await until(
                api,
                url,
                lambda j: (
                    bool(j["attempts"])
                    and all(m["state"] == "running" for m in j["attempts"][-1]["members"])
                ),
            )
            waited = time.monotonic()
            for _ in range(2400 if checkpoint_mb else 0):  # one kept through the gateway
                if await kept(cluster, job_id):
                    break
                await asyncio.sleep(0.05)
            else:
                assert not checkpoint_mb, f"{job_id}: no checkpoint was kept"
            print(f"round {i}: kept after {time.monotonic() - waited:.1f} s", flush=True)
            first = job["attempts"][0]
            node = first["members"][0]["node"]
            sent = time.time()
            fenced = await api.post(f"{base_url}/v1/nodes/{node}/lost", json={"reason": "bench"})
            fenced.raise_for_status()
            job = await until(
                api,
                url,
                lambda j: (
                    len(j["attempts"]) == 2
                    and all(m["state"] == "running" for m in j["attempts"][-1]["members"])
                ),
            )
            second = job["attempts"][-1]
            if checkpoint_mb:  # its members fetched and verified it before they voted
                assert second["resume"]["checkpoint"] == "checkpoint-1", second
            events = docker_events(docker_host, f"tuneplane.attempt={second['id']}", sent - 1)
            started = [e for e in events if e["Action"] == "start"]
            assert len(started) == 2, events
            last = max(e["timeNano"] for e in started) / 1e9
            image = started[0]["Actor"]["Attributes"]["image"]
            got = await phases(cluster, first["id"], second["id"])
            if i:
                rows.append(
                    {
                        "total": last - sent,
                        "fence→ended": got["ended"] - sent,
                        "ended→reserved": got["reserved"] - got["ended"],
                        "reserved→begun": got["began"] - got["reserved"],
                        "prepare+decide": got["decided"] - got["began"],
                        "commit+start": last - got["decided"],
                    }
                )
            await api.post(f"{url}/cancel")
            await until(api, url, lambda j: j["state"] in ("cancelled", "failed", "succeeded"))
    base = await asyncio.to_thread(baseline, docker_host, image, 10)
    title = f"recovery after a fence, 2-member gangs: {rounds}; baseline rounds: {len(base)}"
    title += f"; a checkpoint of {checkpoint_mb} MiB resumed" if checkpoint_mb else ""
    print_phases(title, rows, base, [])  # no gang-wide start baseline here
    print(json.dumps({"rows": rows, "baseline": base}))
