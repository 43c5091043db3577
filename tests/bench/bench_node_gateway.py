"""Node control gateways holding many node streams (not part of the suite).

A real `tp serve` and one or two `tp gateway node` processes (TLS, dev CA, PostgreSQL) on
loopback; two share one address (``TUNEPLANE_NODE_GATEWAY_SHARE_PORT``: the kernel spreads the
connections). Load generator processes (``node_swarm.py``, ``BENCH_WORKERS`` of them) play the
nodes: each node enrolls with its own join token (made through the HTTP API), opens its own TLS
connection and ``Connect`` stream with its credential, says Hello, then sends a heartbeat every
5 s (first beats spread over one interval) and times each answer.

Measured in one run: enrolment (wall time, and each step's median per node), then a steady
window at each stage of ``BENCH_STAGES`` nodes connected (the first, a few nodes, is the
baseline): the gateways' CPU (from /proc, user + system) and resident memory, the load
generators' CPU and their own loop lag (so their lateness is told from the gateways'), and the
heartbeat round trip (p50, p99) as the nodes see it; the cost per stream between stages. With
two gateways, ``BENCH_FAILOVER=1`` then kills one (SIGKILL), times until every node is welcomed
again and beating through the other, and checks the database: every node connected with one
open session, none lost, no session refused. The teardown ends the streams, then stops the
gateways (each records its sessions' ends), and says how long each took.

Run: ``.venv/bin/pytest tests/bench/bench_node_gateway.py -m bench -s`` with the test engine in
``DOCKER_HOST`` as for the suite. ``BENCH_STAGES`` (default ``10,1000``; a stage repeated is
another window at that size), ``BENCH_SECONDS`` (each window, 30), ``BENCH_GATEWAYS`` (1 or
2), ``BENCH_WORKERS`` (load generator processes, 2), ``BENCH_ENROLL_CONCURRENCY`` (per worker,
32), ``BENCH_FAILOVER``, ``BENCH_CONNECT_SECONDS`` (to open each stage's streams, 300).
The benchmark raises its open-file limit to the hard limit (gateways and workers inherit it).
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.bench import node_swarm, prom_window
from tests.bench.proc_stats import cpu_seconds, loadavg, rss_mib, tree_cpu_seconds
from tests.fixtures.nodes import NodeCluster, _wait_for
from tests.fixtures.server import TP, free_port
from tests.support.db import plain_dsn

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

STAGES = [int(s) for s in os.environ.get("BENCH_STAGES", "10,1000").split(",")]
SECONDS = float(os.environ.get("BENCH_SECONDS", "30"))
GATEWAYS = int(os.environ.get("BENCH_GATEWAYS", "1"))
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))
CONCURRENCY = int(os.environ.get("BENCH_ENROLL_CONCURRENCY", "32"))
FAILOVER = os.environ.get("BENCH_FAILOVER", "") == "1"
CONNECT_SECONDS = float(os.environ.get("BENCH_CONNECT_SECONDS", "300"))  # to open a stage
HEARTBEAT = 5


async def postmaster(cluster: NodeCluster) -> int:
    """The PostgreSQL server process of the cluster's database (it runs on this machine)."""
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        stat = await asyncio.to_thread(Path(f"/proc/{backend}/stat").read_text)
    finally:
        await conn.close()
    return int(stat.rsplit(")", 1)[1].split()[1])


class Workers:
    """The load generator processes, each given every WORKERS-th node."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs = []
        for _ in range(WORKERS):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=node_swarm.main, args=(there, cfg), daemon=True)
            proc.start()
            self.pipes.append(here)
            self.procs.append(proc)

    async def ask(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        def one(pipe: Connection, command: tuple[Any, ...]) -> Any:
            pipe.send(command)
            return pipe.recv()

        return await asyncio.gather(
            *(asyncio.to_thread(one, p, c) for p, c in zip(self.pipes, commands, strict=True))
        )

    async def all(self, *command: Any) -> list[Any]:
        return await self.ask([command] * len(self.pipes))

    async def split(self, what: str, names: list[str], *rest: Any) -> list[Any]:
        n = len(self.pipes)
        return await self.ask([(what, names[i::n], *rest) for i in range(n)])

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs if p.pid is not None)

    def close(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
            p.join(10)


def start_second_gateway(cluster: NodeCluster, metrics_port: int) -> subprocess.Popen[bytes]:
    log = cluster.servers.state_dir / "gateway-2.log"
    env = dict(
        cluster.env,
        TUNEPLANE_NODE_GATEWAY_PORT=str(cluster.gateway_port),
        TUNEPLANE_NODE_GATEWAY_METRICS_PORT=str(metrics_port),
    )
    proc = subprocess.Popen(
        [TP, "gateway", "node"], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    _wait_for(lambda: "node gateway on" in log.read_text(), 30, "the second gateway", log)
    return proc


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def explain(
    gateways: list[dict[prom_window.Key, prom_window.Histogram]],
    loadgen: list[dict[str, Any]],
    seconds: float,
) -> dict[str, float]:
    """Where a window's round trips waited: each gateway's loop lag and collections (from its
    metrics port, bucket differences), the load generators' own (exact samples) and the
    generators' heartbeat writes. Prints them; returns the figures the table shows."""
    row: dict[str, float] = {}
    for k, hists in enumerate(gateways, 1):
        for (name, labels), h in sorted(hists.items()):
            if name not in ("tuneplane_event_loop_lag_seconds", "tuneplane_gc_pause_seconds"):
                continue
            what = "loop lag" if "loop" in name else f"gc gen {dict(labels)['generation']}"
            s = prom_window.summary(h, seconds)
            print(f"  gateway {k} {what:<9}: n {s['n']:.0f}, p50 {s['p50_ms']:.1f} ms, p99 "
                  f"{s['p99_ms']:.1f} ms, max <= {s['max_le_ms']:.0f} ms, over 50 ms "
                  f"{s['over_50ms']:.0f}, over 100 ms {s['over_100ms']:.0f}, "
                  f"{s['ms_per_s']:.1f} ms a second")  # fmt: skip
            if k == 1 and what == "loop lag":
                row["gw_lag_p50_ms"], row["gw_lag_p99_ms"] = s["p50_ms"], s["p99_ms"]
                row["gw_lag_over_100ms"] = s["over_100ms"]
            elif k == 1 and what == "gc gen 1":
                row["gw_gc1_p50_ms"], row["gw_gc1_ms_per_s"] = s["p50_ms"], s["ms_per_s"]
    for k, g in enumerate(loadgen, 1):
        lag, writes = g["lag"], g["writes"]
        print(f"  load generator {k} loop lag (20 ms sleeper): n {len(lag)}, p50 "
              f"{1000 * pct(lag, 0.5):.1f} ms, p99 {1000 * pct(lag, 0.99):.1f} ms, max "
              f"{1000 * max(lag, default=0):.1f} ms; heartbeat write p50 "
              f"{1000 * pct(writes, 0.5):.2f} ms, p99 {1000 * pct(writes, 0.99):.2f} ms, max "
              f"{1000 * max(writes, default=0):.1f} ms")  # fmt: skip
        for generation, pauses in sorted(g["gc"].items()):
            print(f"  load generator {k} gc gen {generation}: n {len(pauses)}, p50 "
                  f"{1000 * pct(pauses, 0.5):.1f} ms, max {1000 * max(pauses):.1f} ms, "
                  f"{1000 * sum(pauses) / seconds:.1f} ms a second")  # fmt: skip
    lags = [x for g in loadgen for x in g["lag"]]
    row["loadgen_lag_p99_ms"] = 1000 * max(pct(g["lag"], 0.99) for g in loadgen)
    row["loadgen_lag_max_ms"] = 1000 * max(lags, default=0.0)
    row["loadgen_gc_max_ms"] = 1000 * max(
        (p for g in loadgen for ps in g["gc"].values() for p in ps), default=0.0
    )
    row["loadgen_write_p99_ms"] = 1000 * pct([x for g in loadgen for x in g["writes"]], 0.99)
    return row


async def measure(
    gateways: list[int], metrics: list[int], workers: Workers, seconds: float, nodes: int
) -> dict[str, float]:
    await asyncio.sleep(HEARTBEAT * 2)  # every node beats a couple of times first
    await workers.all("clear")
    before = [await asyncio.to_thread(prom_window.scrape, port) for port in metrics]
    cpu0 = [cpu_seconds(p) for p in gateways]
    w0, t0 = workers.cpu(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu1 = [cpu_seconds(p) for p in gateways]
    w1, t1 = workers.cpu(), time.monotonic()
    after = [await asyncio.to_thread(prom_window.scrape, port) for port in metrics]
    rtts = sorted(r for rs in await workers.all("collect") for r in rs)
    lags = await workers.all("lag")
    windows = [prom_window.window(b, a) for b, a in zip(before, after, strict=True)]
    row = {
        "nodes": nodes,
        "beats_per_s": len(rtts) / (t1 - t0),
        "gateway_cpu_pct": 100 * (sum(cpu1) - sum(cpu0)) / (t1 - t0),
        "gateway_rss_mib": sum(rss_mib(p) for p in gateways),
        "loadgen_cpu_pct": 100 * (w1 - w0) / (t1 - t0),
        "p50_ms": 1000 * statistics.median(rtts),
        "p99_ms": 1000 * rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))],
        **explain(windows, lags, t1 - t0),
        "beats": len(rtts),
    }
    for k, (a, b) in enumerate(zip(cpu0, cpu1, strict=True)):
        row[f"gw{k + 1}_cpu_pct"] = 100 * (b - a) / (t1 - t0)
    return row


async def test_gateway_with_many_node_streams(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the gateways inherit it
    metrics = [free_port() for _ in range(GATEWAYS)]  # each gateway's /metrics
    env = {
        "TUNEPLANE_HEARTBEAT_SECONDS": str(HEARTBEAT),
        "TUNEPLANE_NODE_GATEWAY_METRICS_PORT": str(metrics[0]),
    }
    if GATEWAYS > 1:
        env["TUNEPLANE_NODE_GATEWAY_SHARE_PORT"] = "true"
    cluster = await node_cluster_factory(0, **env)
    assert cluster.gateway is not None
    procs = [cluster.gateway]
    if GATEWAYS > 1:
        procs.append(await asyncio.to_thread(start_second_gateway, cluster, metrics[1]))
    pids = [p.pid for p in procs]
    total = max(STAGES)
    names = [f"sim-{i:05d}" for i in range(total)]
    cfg = {
        "port": cluster.gateway_port,
        "heartbeat": HEARTBEAT,
        "ca": str(cluster.ca),
        "api": cluster.servers.url,
        "headers": cluster.servers.headers,
        "pool": cluster.pool,
        "connect_seconds": CONNECT_SECONDS,
    }
    print(f"\nload average before: {loadavg()}; open-file limit {hard}")
    workers = Workers(cfg)
    rows: list[dict[str, float]] = []
    try:
        await workers.split("enroll", names[:WORKERS], 1)  # warm the API and the gateways
        api = [p.pid for p in cluster.servers.procs]
        pg = await postmaster(cluster)
        api0, pg0 = sum(cpu_seconds(p) for p in api), tree_cpu_seconds(pg)
        gw0, w0, t0 = sum(cpu_seconds(p) for p in pids), workers.cpu(), time.monotonic()
        steps = await workers.split("enroll", names[WORKERS:], CONCURRENCY)
        enrolled = time.monotonic() - t0
        gw_cpu = sum(cpu_seconds(p) for p in pids) - gw0
        w_cpu = workers.cpu() - w0
        api_cpu = sum(cpu_seconds(p) for p in api) - api0
        pg_cpu = tree_cpu_seconds(pg) - pg0
        token = statistics.median(t for s in steps for t in s["token"])
        enroll = statistics.median(t for s in steps for t in s["enroll"])
        print(f"enrolled {total - WORKERS} nodes in {enrolled:.1f} s "
              f"({(total - WORKERS) / enrolled:.0f}/s, {WORKERS}x{CONCURRENCY} at a time): "
              f"median per node {1000 * token:.1f} ms for the join token (HTTP API), "
              f"{1000 * enroll:.1f} ms for Enroll (TLS connection + call); gateway CPU "
              f"{gw_cpu:.1f} s, API CPU {api_cpu:.1f} s, PostgreSQL CPU {pg_cpu:.1f} s, "
              f"load generators' CPU "
              f"{w_cpu:.1f} s")  # fmt: skip
        connected = 0
        for stage in STAGES:
            t0 = time.monotonic()
            late = await workers.split("connect", names[connected:stage])
            if sum(late):
                why = [c["errors"] for c in await workers.all("welcomed")]
                if rows:
                    report(rows)  # the stages measured so far
                raise AssertionError(
                    f"{sum(late)} of {stage - connected} nodes were not welcomed within "
                    f"{CONNECT_SECONDS:.0f} s (BENCH_CONNECT_SECONDS): {why}"
                )
            print(f"{stage - connected} more streams connected in {time.monotonic() - t0:.1f} s")
            connected = stage
            rows.append(await measure(pids, metrics, workers, SECONDS, stage))
            print({k: round(v, 2) for k, v in rows[-1].items()}, flush=True)
        report(rows)
        print(f"load generators' errors: {[c['errors'] for c in await workers.all('welcomed')]}")
        for row in rows:
            assert row["beats"] > 0.9 * row["nodes"] * SECONDS / HEARTBEAT, row
        if FAILOVER and GATEWAYS > 1:
            dsn = plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"])
            await failover(procs[0], workers, connected, dsn)
    finally:
        await asyncio.to_thread(stop, workers, procs)
        cluster.gateway = None  # stopped: the fixture's teardown need not
        print(f"load average after: {loadavg()}")


def report(rows: list[dict[str, float]]) -> None:
    keys = [k for k in rows[0] if k != "beats"]
    print(f"{'':<18}" + "".join(f"{int(r['nodes']):>10}" for r in rows))
    for key in keys[1:]:
        print(f"{key:<18}" + "".join(f"{r[key]:>10.2f}" for r in rows))
    print("per stream, between stages (CPU in % of one core per 1,000 streams; memory in KiB):")
    for a, b in itertools.pairwise(rows):
        dn = b["nodes"] - a["nodes"]
        if not dn:  # a stage repeated: another window at the same size
            continue
        cpu = 1000 * (b["gateway_cpu_pct"] - a["gateway_cpu_pct"]) / dn
        mem = 1024 * (b["gateway_rss_mib"] - a["gateway_rss_mib"]) / dn
        print(f"  {int(a['nodes'])} → {int(b['nodes'])}: CPU {cpu:.2f} %/1k, memory {mem:.1f} KiB")


async def failover(victim: subprocess.Popen[bytes], workers: Workers, nodes: int, dsn: str) -> None:
    """Kill one gateway (SIGKILL: no stream closed, no session ended): its nodes connect again
    through the other. Times until every node is welcomed again and until every node's
    heartbeat is answered again; then checks nothing was lost or doubled: every node connected
    with one open session, none lost, no session refused (connectivity changes reported)."""
    before = await workers.all("welcomed")
    sessions0 = sum(c["sessions"] for c in before)
    conn = await asyncpg.connect(dsn)
    try:
        history0 = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM node_connectivity")
        t0, wall0 = time.monotonic(), time.time()
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 15)
        welcomed_in = beating_in = None
        last = -1
        while beating_in is None or welcomed_in is None:
            counts = await workers.all("welcomed", wall0)
            moved = sum(c["sessions"] for c in counts) - sessions0
            if welcomed_in is None and sum(c["welcomed"] for c in counts) == nodes and moved > 0:
                if moved == last:  # no more reconnections for a second
                    welcomed_in = time.monotonic() - t0
                last = moved
            if beating_in is None and sum(c["beating"] for c in counts) == nodes:
                beating_in = time.monotonic() - t0
            assert time.monotonic() - t0 < 300, counts
            await asyncio.sleep(1)
        await asyncio.sleep(HEARTBEAT * 2)  # the API's expiry had its chance to misjudge
        states = dict(
            await conn.fetch("SELECT connectivity, count(*) FROM nodes GROUP BY connectivity")
        )
        open_links = await conn.fetchval("SELECT count(*) FROM node_links WHERE closed_at IS NULL")
        changes = await conn.fetch(
            "SELECT connectivity, count(*) FROM node_connectivity WHERE seq > $1 "
            "GROUP BY connectivity",
            history0,
        )
        refused = await conn.fetchval(
            "SELECT coalesce(sum(count), 0) FROM node_events WHERE kind = 'session_refused'"
        )
    finally:
        await conn.close()
    errors = [c["errors"] for c in counts]
    print(f"failover: one gateway killed (SIGKILL); {moved} nodes connected again through the "
          f"other; all {nodes} welcomed {welcomed_in:.1f} s after the kill, all heartbeats "
          f"answered again {beating_in:.1f} s after it; nodes by connectivity {states}, open "
          f"sessions {open_links}, connectivity changes since the kill {dict(changes)}, "
          f"sessions refused {refused}; load generators' errors {errors}")  # fmt: skip
    # a node whose stream waited more than the session timeout (30 s) to be opened again may
    # be marked disconnected meanwhile (its members "unknown"), and connected again by its new
    # session: reported above; none is lost (declared failed), none has two sessions
    assert set(states) == {"connected"} and states["connected"] >= nodes, states
    assert open_links == nodes and "lost" not in dict(changes) and not refused


def stop(workers: Workers, gateways: list[subprocess.Popen[bytes]]) -> None:
    """End the streams (the workers stop), then the gateways (SIGTERM: each records its
    sessions' ends, in batches, before it exits); says how long each step took."""
    t0 = time.monotonic()
    try:
        for pipe in workers.pipes:
            pipe.send(("stop",))
        for pipe in workers.pipes:
            if pipe.poll(120):
                pipe.recv()
    except (OSError, EOFError):
        pass
    workers.close()
    t1 = time.monotonic()
    for p in gateways:
        if p.poll() is None:
            p.terminate()
    for p in gateways:
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            print(f"gateway {p.pid} still closing sessions after 120 s: killed")
            p.kill()
            p.wait(15)
    print(f"teardown: streams ended in {t1 - t0:.1f} s, gateways stopped "
          f"{time.monotonic() - t1:.1f} s later")  # fmt: skip
