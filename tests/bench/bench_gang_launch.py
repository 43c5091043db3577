"""Gang launch latency on the node backend, beyond container start time (not part of the suite).

A real cluster on loopback (`tp serve`, `tp gateway node` over TLS, four `tp node run` daemons,
one engine, 1 s heartbeats) launches 4-member gangs of `true` one after the other. For each:
from the moment `POST /v1/jobs` is sent to the engine's `start` event of the last member, split
into phases read from the database (reserved and launch begun, all votes in, Commit decided,
last member started). Baselines in the same run: creating and starting one container of the same
image straight through the Docker Engine API, which every member pays at least once anyway; and
the same gangs with wake-up hints off (``TUNEPLANE_SIGNALS=off``: the coordinator and the
gateway find each other's writes only by polling, every 1 s and 0.5 s).

Run: ``.venv/bin/pytest tests/bench/bench_gang_launch.py -m bench -s`` (``BENCH_GANGS=N`` for
another count than 10) (the engine
from ``deploy/dev/dockerd.sh`` in DOCKER_HOST, as for the test suite).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.e2e.test_node_backend import cli_for, docker_events
from tests.fixtures.nodes import NodeCluster
from tests.support.db import plain_dsn

pytestmark = pytest.mark.bench

GANGS = 10
MEDIANS: dict[str, float] = {}  # signals setting → median total, across the parametrized runs


def engine(docker_host: str) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
    return httpx.Client(transport=transport, base_url="http://engine", timeout=60)


def baseline(docker_host: str, image: str, rounds: int) -> list[float]:
    """Seconds from POST /containers/create to the answer of POST /containers/{id}/start."""
    times = []
    with engine(docker_host) as c:
        for _ in range(rounds):
            t0 = time.perf_counter()
            r = c.post("/containers/create", json={"Image": image, "Cmd": ["true"]})
            r.raise_for_status()
            cid = r.json()["Id"]
            c.post(f"/containers/{cid}/start").raise_for_status()
            times.append(time.perf_counter() - t0)
            c.post(f"/containers/{cid}/wait")
            c.delete(f"/containers/{cid}", params={"force": "true"})
    return times


async def phases(cluster: NodeCluster, attempt_id: str) -> dict[str, float]:
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        row = await conn.fetchrow(
            "SELECT extract(epoch FROM l.began_at) AS began, "
            "extract(epoch FROM l.decided_at) AS decided, "
            "(SELECT extract(epoch FROM max(voted_at)) FROM member_launches m "
            " WHERE m.attempt_id = l.attempt_id) AS voted "
            "FROM launches l WHERE l.attempt_id = $1",
            attempt_id,
        )
    finally:
        await conn.close()
    assert row is not None
    return {k: float(row[k]) for k in ("began", "voted", "decided")}


def print_phases(title: str, rows: list[dict[str, float]], base: list[float]) -> float:
    """Print the median and p90 of each phase (``total`` among them) and how the total compares
    with one container start; return the median total."""
    b = statistics.median(base)
    print(f"\n{title}")
    print(f"{'phase':<16}{'median s':>10}{'p90 s':>10}")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"{key:<16}{statistics.median(values):>10.3f}{pct(values, 0.9):>10.3f}")
    total = statistics.median(r["total"] for r in rows)
    print(f"{'baseline (1 container create+start)':<36}{b:>8.3f} s")
    print(f"beyond container start: {total - b:.3f} s; ratio total/baseline: {total / b:.1f}")
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@pytest.mark.parametrize("signals", ["on", "off"])
async def test_gang_launch_latency(
    signals: str,
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
    docker_host: str,
    tmp_path: Path,
) -> None:
    gangs = int(os.environ.get("BENCH_GANGS", GANGS))
    cluster = await node_cluster_factory(4, TUNEPLANE_SIGNALS=signals)
    await cli_for(cluster, tmp_path)  # the experiment `hello` exists in a workspace
    rows: list[dict[str, float]] = []
    image = ""
    async with httpx.AsyncClient(headers=cluster.servers.headers, timeout=60) as api:
        for i in range(gangs + 1):  # the first gang warms caches and is not counted
            intent = {
                "experiment": "hello",
                "method": "custom/custom",
                "profile": "nodes/cpu:2",
                "params": {"command": f"true {i}"},
            }
            r = await api.post(f"{cluster.servers.url}/v1/previews", json=intent)
            r.raise_for_status()
            p = r.json()
            body = {"preview_id": p["id"], "digest": p["digest"], "retry_key": str(uuid.uuid4())}
            sent = time.time()
            r = await api.post(f"{cluster.servers.url}/v1/jobs", json=body)
            r.raise_for_status()
            job_id = r.json()["job_id"]
            started: list[dict[str, Any]] = []
            while len(started) < 4:
                await asyncio.sleep(0.05)
                job = (await api.get(f"{cluster.servers.url}/v1/jobs/{job_id}")).json()
                if not job["attempts"]:
                    continue
                attempt_id = job["attempts"][-1]["id"]
                events = docker_events(docker_host, f"tuneplane.attempt={attempt_id}", sent - 1)
                started = [e for e in events if e["Action"] == "start"]
            last = max(e["timeNano"] for e in started) / 1e9
            image = started[0]["Actor"]["Attributes"]["image"]
            got = await phases(cluster, attempt_id)
            if i:
                rows.append(
                    {
                        "total": last - sent,
                        "reserve+begin": got["began"] - sent,
                        "prepare+vote": got["voted"] - got["began"],
                        "decide": got["decided"] - got["voted"],
                        "commit+start": last - got["decided"],
                    }
                )
            while job["state"] not in ("succeeded", "failed", "cancelled"):
                await asyncio.sleep(0.2)
                job = (await api.get(f"{cluster.servers.url}/v1/jobs/{job_id}")).json()
            assert job["state"] == "succeeded", job
    base = await asyncio.to_thread(baseline, docker_host, image, 10)
    title = f"signals {signals}; 4-member gangs: {gangs}; baseline rounds: {len(base)}; {image}"
    MEDIANS[signals] = print_phases(title, rows, base)
    if len(MEDIANS) == 2:
        print(f"ratio total with signals on / off: {MEDIANS['on'] / MEDIANS['off']:.2f}")
    print(json.dumps({"rows": rows, "baseline": base}))
