"""Gang launch latency on the node backend, beyond container start time (not part of the suite).

A real cluster on loopback (`tp serve`, `tp gateway node` over TLS, four `tp node run` daemons,
one engine, 1 s heartbeats) launches 4-member gangs of `true` one after the other. For each:
from the moment `POST /v1/jobs` is sent to the engine's `start` event of the last member, split
into phases read from the database (reserved and launch begun, all votes in, Commit decided,
last member started). Baselines in the same run: creating and starting one container of the same
image straight through the Docker Engine API, which every member pays at least once anyway; and
the same gangs with wake-up hints off (``TUNEPLANE_SIGNALS=off``: the coordinator and the
gateway find each other's writes only by polling, every 1 s and 0.5 s).

At scale (``BENCH_MEMBERS=32``: as many daemons as members, each 0.5 CPU and 256 MiB) the
baseline adds creating and starting ``BENCH_MEMBERS`` containers at once straight through the
Engine API (what the engine alone takes for the gang's containers). ``test_gangs_committed_at_once``
(``BENCH_BURST``, 100 gangs of ``BENCH_BURST_MEMBERS``, 8, on ``BENCH_BURST_DAEMONS``, 32)
commits them all at once and checks that every gang's members all started, or none, from the
database (the launch ledger) and from the engine's events.

With ``BENCH_EXECUTOR=process`` the daemons run members as host processes (``tp node run
--executor process``, no container engine in the path): a member has started when its shim wrote
``started.json`` (the time it records, just before the member's program runs), and the baseline
is one host process spawned straight (``subprocess``), what each member pays at least once. On
one 2-core machine that is what 32 machines each starting one container would show beyond their
own container start: the control plane's and the daemons' part, without 32 starts queued on one
engine.

Run: ``.venv/bin/pytest tests/bench/bench_gang_launch.py -m bench -s`` (``BENCH_GANGS=N`` for
another count than 10; ``BENCH_MEMBERS``, 4; ``BENCH_SIGNALS``, ``on,off``; ``-k committed``
for the burst alone) (the engine from ``deploy/dev/dockerd.sh`` in DOCKER_HOST, as for the test
suite).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from adapters.node.process_records import read_json
from tests.e2e.test_node_backend import cli_for, docker_events
from tests.fixtures.nodes import NodeCluster
from tests.support.db import plain_dsn

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

GANGS = 10
MEMBERS = int(os.environ.get("BENCH_MEMBERS", "4"))
SIGNALS = os.environ.get("BENCH_SIGNALS", "on,off").split(",")
EXECUTOR = os.environ.get("BENCH_EXECUTOR", "container")  # or "process"
BURST = int(os.environ.get("BENCH_BURST", "100"))
BURST_MEMBERS = int(os.environ.get("BENCH_BURST_MEMBERS", "8"))
BURST_DAEMONS = int(os.environ.get("BENCH_BURST_DAEMONS", "32"))
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


def process_baseline(rounds: int) -> list[float]:
    """Seconds to spawn one host process (``true``) and see it running: the process executor's
    counterpart of one container start."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        proc = subprocess.Popen(["true"])
        times.append(time.perf_counter() - t0)
        proc.wait()
    return times


def process_starts(cluster: NodeCluster, attempt_id: str) -> list[float]:
    """When each host-process member of ``attempt_id`` started, from its shim's records in the
    daemons' state directories (``member.json`` names the attempt, ``started.json`` the time)."""
    starts = []
    for member in (cluster.servers.state_dir / "nodes").glob("*/processes/*/member.json"):
        record = read_json(member)
        started = read_json(member.parent / "started.json")
        if record and started and record["ref"]["attempt_id"] == attempt_id:
            starts.append(float(started["at"]))
    return starts


def parallel_baseline(docker_host: str, image: str, count: int) -> float:
    """Seconds from sending ``count`` container creates at once to the last start answered,
    straight through the Engine API (one connection each, as each daemon has its own)."""

    async def all_at_once() -> float:
        path = docker_host.removeprefix("unix://")
        clients = [
            httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=path), base_url="http://engine", timeout=120
            )
            for _ in range(count)
        ]
        ids: list[str] = []

        async def one(c: httpx.AsyncClient) -> None:
            r = await c.post("/containers/create", json={"Image": image, "Cmd": ["true"]})
            r.raise_for_status()
            ids.append(r.json()["Id"])
            (await c.post(f"/containers/{ids[-1]}/start")).raise_for_status()

        try:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(c) for c in clients))
            took = time.perf_counter() - t0
            for cid in ids:
                await clients[0].post(f"/containers/{cid}/wait")
                await clients[0].delete(f"/containers/{cid}", params={"force": "true"})
        finally:
            for c in clients:
                await c.aclose()
        return took

    return asyncio.run(all_at_once())


async def cluster_of(
    factory: Callable[..., Awaitable[NodeCluster]], daemons: int, **env: str
) -> NodeCluster:
    """A cluster with ``daemons`` node daemons, given time to connect on two shared cores (the
    fixture waits 60 s, too little for 32 daemons and their collectors starting at once)."""
    cluster = await factory(0, **env)
    names = [f"n{i}" for i in range(1, daemons + 1)]
    for name in names:
        await asyncio.to_thread(cluster.start_daemon, name)
    await asyncio.to_thread(cluster.wait_connected, names, 60 + 10 * daemons)
    return cluster


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


def print_phases(
    title: str, rows: list[dict[str, float]], base: list[float], parallel: list[float]
) -> float:
    """Print the median and p90 of each phase (``total`` among them) and how the total compares
    with one container start; return the median total."""
    b = statistics.median(base)
    print(f"\n{title}")
    print(f"{'phase':<16}{'median s':>10}{'p90 s':>10}")
    for key in rows[0]:
        values = [r[key] for r in rows]
        print(f"{key:<16}{statistics.median(values):>10.3f}{pct(values, 0.9):>10.3f}")
    total = statistics.median(r["total"] for r in rows)
    one = "1 host process spawned" if EXECUTOR == "process" else "1 container create+start"
    print(f"{'baseline (' + one + ')':<36}{b:>8.3f} s")
    if parallel:
        p = statistics.median(parallel)
        print(f"baseline ({MEMBERS} containers created+started at once, median of "
              f"{len(parallel)}): {p:.3f} s; total beyond that: {total - p:.3f} s")  # fmt: skip
    print(f"beyond one start: {total - b:.3f} s; ratio total/baseline: {total / b:.1f}")
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@pytest.mark.parametrize("signals", SIGNALS)
async def test_gang_launch_latency(
    signals: str,
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
    docker_host: str,
    tmp_path: Path,
) -> None:
    gangs = int(os.environ.get("BENCH_GANGS", GANGS))
    executor = {"TUNEPLANE_NODE_EXECUTOR": "process"} if EXECUTOR == "process" else {}
    cluster = await cluster_of(node_cluster_factory, MEMBERS, TUNEPLANE_SIGNALS=signals, **executor)
    await cli_for(cluster, tmp_path)  # the experiment `hello` exists in a workspace
    rows: list[dict[str, float]] = []
    image = ""
    async with httpx.AsyncClient(headers=cluster.servers.headers, timeout=60) as api:
        for i in range(gangs + 1):  # the first gang warms caches and is not counted
            intent = {
                "experiment": "hello",
                "method": "custom/custom",
                "profile": f"nodes/cpu:{MEMBERS * cluster.cpus:g}",
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
            starts: list[float] = []
            while len(starts) < MEMBERS:
                await asyncio.sleep(0.05)
                job = (await api.get(f"{cluster.servers.url}/v1/jobs/{job_id}")).json()
                if not job["attempts"]:
                    continue
                attempt_id = job["attempts"][-1]["id"]
                if EXECUTOR == "process":
                    starts = await asyncio.to_thread(process_starts, cluster, attempt_id)
                    continue
                events = docker_events(docker_host, f"tuneplane.attempt={attempt_id}", sent - 1)
                started = [e for e in events if e["Action"] == "start"]
                starts = [e["timeNano"] / 1e9 for e in started]
                if started:
                    image = started[0]["Actor"]["Attributes"]["image"]
            last = max(starts)
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
    if EXECUTOR == "process":
        base = await asyncio.to_thread(process_baseline, 10)
        image = "host processes (--executor process)"
    else:
        base = await asyncio.to_thread(baseline, docker_host, image, 10)
    parallel = []
    if MEMBERS > 4 and EXECUTOR != "process":
        for _ in range(5):
            parallel.append(await asyncio.to_thread(parallel_baseline, docker_host, image, MEMBERS))
    title = (
        f"signals {signals}; {MEMBERS}-member gangs on {MEMBERS} daemons: {gangs}; "
        f"baseline rounds: {len(base)}; {image}"
    )
    MEDIANS[signals] = print_phases(title, rows, base, parallel)
    if len(MEDIANS) == 2:
        print(f"ratio total with signals on / off: {MEDIANS['on'] / MEDIANS['off']:.2f}")
    print(json.dumps({"rows": rows, "baseline": base, "parallel": parallel}))


STARTED = ("starting", "running", "exited", "missing")  # phases of a member told to start


class EngineEvents:
    """The engine's container events as they happen (its own buffer keeps only the last
    thousand or so, fewer than 100 gangs make), read by a thread from a streaming request."""

    def __init__(self, docker_host: str, label: str) -> None:
        self.events: list[dict[str, Any]] = []
        transport = httpx.HTTPTransport(uds=docker_host.removeprefix("unix://"))
        self.client = httpx.Client(transport=transport, base_url="http://engine", timeout=None)
        self.filters = json.dumps({"type": ["container"], "label": [label]})
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the engine's event stream did not open"

    def _follow(self) -> None:
        params = {"filters": self.filters}
        # closing the client ends the stream with an error: that is how it stops
        events = self.client.stream("GET", "/events", params=params)
        with contextlib.suppress(Exception), events as r:
            self.ready.set()
            for line in r.iter_lines():
                if line.strip():
                    self.events.append(json.loads(line))

    def close(self) -> list[dict[str, Any]]:
        self.client.close()
        self.thread.join(10)
        return self.events


async def test_gangs_committed_at_once(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
    docker_host: str,
    tmp_path: Path,
) -> None:
    """``BURST`` gangs committed at once on ``BURST_DAEMONS`` daemons: every gang starts, and
    no gang ever starts in part (checked from the launch ledger and from the engine)."""
    cluster = await cluster_of(node_cluster_factory, BURST_DAEMONS)
    await cli_for(cluster, tmp_path)
    profile = f"nodes/cpu:{BURST_MEMBERS * cluster.cpus:g}"
    limit = asyncio.Semaphore(8)
    url = cluster.servers.url
    async with httpx.AsyncClient(headers=cluster.servers.headers, timeout=120) as api:

        async def preview(i: int) -> dict[str, Any]:
            intent = {
                "experiment": "hello",
                "method": "custom/custom",
                "profile": profile,
                "params": {"command": f"true burst {i}"},
            }
            async with limit:
                r = await api.post(f"{url}/v1/previews", json=intent)
            r.raise_for_status()
            p = r.json()
            return {"preview_id": p["id"], "digest": p["digest"], "retry_key": str(uuid.uuid4())}

        bodies = await asyncio.gather(*(preview(i) for i in range(BURST)))
        follow = await asyncio.to_thread(EngineEvents, docker_host, "tuneplane.attempt")
        t0 = time.monotonic()
        replies = await asyncio.gather(*(api.post(f"{url}/v1/jobs", json=b) for b in bodies))
        committed = time.monotonic() - t0
        job_ids = [r.raise_for_status().json()["job_id"] for r in replies]
        states: dict[str, str] = {}
        while len(states) < len(job_ids):
            await asyncio.sleep(1)
            for job_id in [j for j in job_ids if j not in states]:
                job = (await api.get(f"{url}/v1/jobs/{job_id}")).json()
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    states[job_id] = job["state"]
            assert time.monotonic() - t0 < 1800, f"{len(states)} of {len(job_ids)} ended"
        took = time.monotonic() - t0
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        rows = await conn.fetch(
            "SELECT l.attempt_id, l.job_id, l.decision, count(*) AS members, "
            "count(*) FILTER (WHERE m.phase = ANY($2::text[])) AS started "
            "FROM launches l JOIN member_launches m USING (attempt_id) "
            "WHERE l.job_id = ANY($1::text[]) GROUP BY 1, 2, 3",
            job_ids,
            list(STARTED),
        )
    finally:
        await conn.close()
    await asyncio.sleep(2)  # the last events reach the stream
    events = await asyncio.to_thread(follow.close)
    engine: dict[str, set[str]] = {}
    for e in events:
        if e["Action"] == "start":
            attrs = e["Actor"]["Attributes"]
            engine.setdefault(attrs["tuneplane.attempt"], set()).add(attrs["tuneplane.member"])
    ours = {r["attempt_id"] for r in rows}  # the engine is shared: other tests' containers too
    engine = {a: m for a, m in engine.items() if a in ours}
    partial_db = [r["attempt_id"] for r in rows if r["started"] not in (0, r["members"])]
    partial_engine = [a for a, m in engine.items() if len(m) != BURST_MEMBERS]
    aborted = [r for r in rows if r["decision"] != "commit"]
    print(f"\n{BURST} gangs of {BURST_MEMBERS} on {BURST_DAEMONS} daemons committed in "
          f"{committed:.1f} s (HTTP), all ended {took:.1f} s after the first commit was sent; "
          f"{len(rows)} launches ({len(aborted)} not committed), {len(engine)} gangs started in "
          f"the engine; partial gangs: {len(partial_db)} in the ledger, {len(partial_engine)} "
          f"in the engine; job states: {sorted(set(states.values()))}")  # fmt: skip
    assert not partial_db and not partial_engine, (partial_db, partial_engine)
    assert all(s == "succeeded" for s in states.values()), states
    assert len({r["job_id"] for r in rows if r["decision"] == "commit"}) == BURST
