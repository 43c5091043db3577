"""Thousands of collector streams on the telemetry gateway, in one run (not part of the suite).

A private, durable embedded PostgreSQL (fsync and synchronous commit on, as in production), one
job with ``BENCH_STREAMS`` members (2,000) and a collector token each. Load generator processes
(``telemetry_load.py``, ``BENCH_LOADERS`` of them) play the collectors: one TLS connection and
one ``Append`` stream per member, each sending a batch of ``BENCH_POINTS`` (100) points every
second, phases spread over the second, for ``BENCH_SECONDS`` (30). Each batch's ack round trip is
timed; the figures come from the batches sent after ``BENCH_WARMUP`` (5) seconds.
``BENCH_CLIENT`` picks the load generator's HTTP/2 client: ``raw`` (default, frames written by
hand: ``telemetry_load_raw.py``), ``grpclib`` (the collector's) or ``aio`` (grpcio's
``grpc.aio``); the gateway sees the same connections, streams and messages from each.
``BENCH_ACKS``: ``cumulative`` (default, as the collector asks since session 45: an ack of a seq
acknowledges every batch up to it, so a gateway that fell behind stores a stream's queued
batches together) or ``each`` (one ack a batch, as older collectors; ``grpclib`` and ``raw``).

Two configurations in the same run, each on a fresh set of members: (1) one ``tp gateway
telemetry``; (2) two gateway processes sharing one port (``TUNEPLANE_TELEMETRY_GATEWAY_SHARE_
PORT``: SO_REUSEPORT, the kernel spreads the collectors' connections between them), where, with
``BENCH_KILL`` set, one of the two is killed (SIGKILL) halfway through: its collectors reconnect
to the same address, reach the survivor, and resend what was not acknowledged.

After each: every series is checked in PostgreSQL: exactly the records sent, each point once
(count = distinct steps = records sent), and the members' counters agree. CPU (user + system,
from /proc) of the gateways, of PostgreSQL (the postmaster and its children) and of the load
generators over the measured window, as shares of one core. The rollups' deltas still pending
at the end are folded (their PostgreSQL CPU counted in the run's) and every series' coarsest
rollup bucket is checked too: count, first and last step equal to what was sent.
``BENCH_PGSS`` (a PostgreSQL bin directory with pg_stat_statements, e.g. the Debian server's
``/usr/lib/postgresql/15/bin``) prints PostgreSQL's costliest statements per configuration.
The acks are also resolved in time (``telemetry_timeline.py``): per 250 ms slot, the acks'
latencies, each part's CPU and what PostgreSQL ran (folds, long statements, autovacuum).

Run: ``.venv/bin/pytest tests/bench/bench_telemetry_streams.py -m bench -s``
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest

from adapters.collector_tokens import CollectorTokens
from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres
from adapters.postgres.engine import create_engine
from adapters.postgres.metric_rollups import fold_oldest
from adapters.postgres.signing_keys import PostgresSigningKeys
from adapters.postgres.uow import PostgresUnitOfWork
from adapters.tls import ensure_dev_pki
from domain.telemetry import STORED_TIERS, MemberScope
from tests.bench.admission_report import python_speed
from tests.bench.pg_statements import statements
from tests.bench.proc_stats import cpu_seconds, family, loadavg, rss_mib
from tests.bench.telemetry_timeline import Timeline, by_second, render
from tests.contract.builders import a_job, a_member, an_attempt
from tests.fixtures.server import TP, free_port
from tests.support.db import plain_dsn

pytestmark = pytest.mark.bench

STREAMS = int(os.environ.get("BENCH_STREAMS", "2000"))
POINTS = int(os.environ.get("BENCH_POINTS", "100"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "30"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "5"))
LOADERS = int(os.environ.get("BENCH_LOADERS", "2"))
CONFIGS = os.environ.get("BENCH_CONFIGS", "1,2,2k").split(",")  # gateways; k: kill one
PGSS = os.environ.get("BENCH_PGSS")  # a PostgreSQL bin dir with pg_stat_statements: its report
CLIENT = os.environ.get("BENCH_CLIENT", "raw")  # the load generator's: grpclib, aio, raw
ACKS = os.environ.get("BENCH_ACKS", "cumulative")  # "each": one ack a batch (older collectors)
PYSPY = os.environ.get("BENCH_PYSPY")  # a py-spy binary: profile the first gateway's window


async def _commits(url: str) -> int:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        return int(await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ))  # fmt: skip
    finally:
        await conn.close()


def commits(url: str) -> int:
    """Transactions committed in the database so far: a group commit is one (the fold and the
    members' status reads are a few more)."""
    return asyncio.run(_commits(url))


@pytest.fixture(scope="module")
def durable_pg() -> Iterator[tuple[str, int]]:
    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-tel-"))
    pg = EmbeddedPostgres(  # the Debian server has pg_stat_statements, pgserver's has not
        tmp / "pg", durable=True, max_connections=100, bin_dir=Path(PGSS) if PGSS else None
    )
    url = pg.start()
    if PGSS:  # restart with pg_stat_statements loaded
        (pg.pgdata / "postgresql.auto.conf").open("a").write(
            "shared_preload_libraries = 'pg_stat_statements'\n"
            "pg_stat_statements.track_planning = on\n"
        )
        pg.stop()
        url = pg.start()
    migrate.upgrade(url)
    postmaster = int((pg.pgdata / "postmaster.pid").read_text().split()[0])
    try:
        yield url, postmaster
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # a 2,000-stream run leaves about 1.4 GB


async def add_members(url: str, count: int) -> list[dict[str, object]]:
    engine = create_engine(url)
    job = a_job()
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.jobs.add(job)
            attempt = an_attempt(job, 1)
            await uow.attempts.add(attempt)
            members = [a_member(attempt, i) for i in range(count)]
            for m in members:
                await uow.members.add(m)
            await uow.commit()
    finally:
        await engine.dispose()
    pool = await asyncpg.create_pool(plain_dsn(url), min_size=1, max_size=2)
    try:
        tokens = CollectorTokens(PostgresSigningKeys(pool))
        out: list[dict[str, object]] = []
        for i, m in enumerate(members):
            scope = MemberScope(job.id, attempt.id, m.id, i)
            token = await tokens.issue(scope, datetime.now(UTC), 86400)
            out.append({"attempt": attempt.id, "member": m.id, "index": i, "token": token})
        return out
    finally:
        await pool.close()


async def fold_rest(url: str) -> tuple[int, float]:
    """Fold the rollups' deltas still pending after the run (a fold runs every few seconds
    while batches arrive: what was acked after the last one); returns how many there were and
    the CPU seconds their folding took PostgreSQL."""
    pool = await asyncpg.create_pool(plain_dsn(url), min_size=1, max_size=1)
    try:
        backend = int(await pool.fetchval("SELECT pg_backend_pid()"))
        cpu0 = cpu_seconds(backend)
        pending = int(await pool.fetchval("SELECT count(*) FROM metric_rollup_deltas"))
        while await pool.fetchval("SELECT count(*) FROM metric_rollup_deltas"):
            await fold_oldest(pool)
        return pending, cpu_seconds(backend) - cpu0
    finally:
        await pool.close()


async def check_stored(url: str, records: dict[str, int]) -> tuple[list[str], int]:
    """Differences between what was sent and what PostgreSQL holds (at most 20), and the
    points stored; the rollups (all folded) hold every point once too (their coarsest tier's
    count, first and last step per series)."""
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        rollups = {
            (r["member_id"], r["tag"]): (r["count"], r["first_step"], r["last_step"])
            for r in await conn.fetch(
                "SELECT s.member_id, s.tag, r.count, r.first_step, r.last_step"
                " FROM metric_rollups r JOIN metric_series s ON s.id = r.series_id"
                " WHERE s.member_id = ANY($1::text[]) AND r.width = $2",
                list(records),
                STORED_TIERS[-1],
            )
        }
        rows = await conn.fetch(
            "SELECT s.member_id, s.tag, count(*) AS n, count(DISTINCT p.step) AS steps,"
            " min(p.step) AS lo, max(p.step) AS hi, s.count AS series_count"
            " FROM metric_points p JOIN metric_series s ON s.id = p.series_id"
            " WHERE s.member_id = ANY($1::text[]) GROUP BY s.id",
            list(records),
        )
        counters = {
            r["member_id"]: r["points"]
            for r in await conn.fetch(
                "SELECT member_id, points FROM telemetry_members WHERE member_id = ANY($1)",
                list(records),
            )
        }
    finally:
        await conn.close()
    problems: list[str] = []
    seen: dict[str, int] = {}
    for r in rows:
        want = records[r["member_id"]]
        seen[r["member_id"]] = seen.get(r["member_id"], 0) + 1
        if (r["n"], r["steps"], r["lo"], r["hi"], r["series_count"]) != (
            want, want, 0, want - 1, want
        ):  # fmt: skip
            problems.append(f"member {r['member_id']} {r['tag']}: {dict(r)}, {want} sent")
        got = rollups.get((r["member_id"], r["tag"]))
        if got != (want, 0, want - 1):
            problems.append(f"member {r['member_id']} {r['tag']}: rollup {got}, {want} sent")
    for member, want in records.items():
        if want and seen.get(member) != 4:
            problems.append(f"member {member}: {seen.get(member, 0)} series of 4")
        if counters.get(member, 0) != want * 4:
            problems.append(f"member {member}: counter {counters.get(member)} != {want * 4}")
    return problems[:20], sum(r["n"] for r in rows)


def start_gateway(
    root: Path, url: str, port: int, name: str, share: bool
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        TUNEPLANE_DATABASE_URL=url,
        TUNEPLANE_STATE_DIR=str(root / "state"),
        TUNEPLANE_TELEMETRY_GATEWAY_PORT=str(port),
        TUNEPLANE_TELEMETRY_GATEWAY_SHARE_PORT="true" if share else "false",
        TUNEPLANE_TELEMETRY_COMPACT_SECONDS="0",
    )
    log = (root / f"{name}.log").open("ab")
    return subprocess.Popen([TP, "gateway", "telemetry"], env=env, stdout=log, stderr=log)


def wait_listening(port: int, within: float = 60) -> None:
    import socket

    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"no gateway on port {port} after {within} s")


def run_config(root: Path, url: str, postmaster: int, gateways: int, kill: bool) -> dict[str, Any]:
    members = asyncio.run(add_members(url, STREAMS))
    if PGSS:
        asyncio.run(statements(url, reset=True))
    ca = ensure_dev_pki(root / "state", ["localhost", "127.0.0.1"]).ca.cert
    port = free_port()
    procs = [start_gateway(root, url, port, f"gateway-{gateways}-{i}", gateways > 1)
             for i in range(gateways)]  # fmt: skip
    loaders: list[subprocess.Popen[str]] = []
    try:
        wait_listening(port)
        time.sleep(1.0)  # both processes listening
        t0 = time.monotonic()
        for k in range(LOADERS):
            plan = root / f"plan-{gateways}-{k}.json"
            plan.write_text(json.dumps({
                "gateways": [["127.0.0.1", port]], "ca": str(ca), "points": POINTS,
                "client": CLIENT, "acks": ACKS, "members": members[k::LOADERS],
            }))  # fmt: skip
            loaders.append(subprocess.Popen(
                [sys.executable, "-m", "tests.bench.telemetry_load", str(plan)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            ))  # fmt: skip
        for p in loaders:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        connect_s = time.monotonic() - t0
        start = time.time() + 1.0
        timeline = Timeline(url, lambda: {"gateways": [p.pid for p in procs],
                            "postgres": family(postmaster), "load": [p.pid for p in loaders]},
                            cpu_seconds)  # fmt: skip
        timeline.start()
        whole = {p.pid: cpu_seconds(p.pid) for p in procs}  # the run: from go to the last ack
        whole.update({p: cpu_seconds(p) for p in family(postmaster)})
        for p in loaders:
            assert p.stdin is not None
            p.stdin.write(f"go {start} {SECONDS}\n")
            p.stdin.flush()
        time.sleep(max(0.0, start + WARMUP - time.time()))
        pg_pids = family(postmaster)
        watched = {"gateways": [p.pid for p in procs], "postgres": pg_pids,
                   "load": [p.pid for p in loaders]}  # fmt: skip
        cpu0 = {p: cpu_seconds(p) for v in watched.values() for p in v}
        load_before, w0, xact0 = loadavg(), time.monotonic(), commits(url)
        spy = None
        if PYSPY:
            spy = subprocess.Popen(
                [PYSPY, "record", "-p", str(procs[0].pid), "-d", str(int(SECONDS - WARMUP) - 1),
                 "-f", "raw", "-o", str(root / f"gateway-{gateways}.folded"), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        killed_at = None
        if kill:
            time.sleep((SECONDS - WARMUP) / 2)
            last = cpu_seconds(procs[0].pid)  # its CPU until it dies (gone from /proc after)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait(10)
            killed_at = time.time()
        time.sleep(max(0.0, start + SECONDS - time.time()))
        window = time.monotonic() - w0
        cpu1 = {p: cpu_seconds(p) for v in watched.values() for p in v}
        xacts = commits(url) - xact0
        if kill:
            cpu1[procs[0].pid] = last
        used = {k: sum(max(0.0, cpu1[p] - cpu0[p]) for p in v) for k, v in watched.items()}
        rss = [rss_mib(p.pid) for p in procs if p.poll() is None]
        load_after = loadavg()
        for p in loaders:
            assert p.wait(300) == 0
        timeline.finish()
        ran = {p: cpu_seconds(p) - c for p, c in whole.items()}
        if kill:
            ran[procs[0].pid] = last - whole[procs[0].pid]
        run_cpu = {
            "gateways": sum(ran[p.pid] for p in procs),
            "postgres": sum(max(0.0, c) for p, c in ran.items() if p not in [g.pid for g in procs]),
        }
        if spy is not None:
            spy.wait(60)
            print(f"\nprofile: {root / f'gateway-{gateways}.folded'}")
    finally:
        for p in loaders:
            if p.poll() is None:
                p.kill()
        for g in procs:
            if g.poll() is None:
                g.terminate()
                g.wait(10)
    outs = [json.loads((root / f"plan-{gateways}-{k}.json.out.json").read_text())
            for k in range(LOADERS)]  # fmt: skip
    records = {m: n for o in outs for m, n in o["records"].items()}
    lat = np.array([x for o in outs for x in o["latencies"]]).reshape(-1, 2)
    steady = lat[lat[:, 0] >= start + WARMUP][:, 1] * 1000
    pending, fold_cpu = asyncio.run(fold_rest(url))  # the run's: the gateway would fold it later
    run_cpu["postgres"] += fold_cpu
    if PGSS:
        asyncio.run(statements(url, reset=False))
    problems, stored = asyncio.run(check_stored(url, records))
    cores = {k: used[k] / window for k in used}
    run_cpu["load"] = sum(o["cpu"] for o in outs)
    batches = sum(records.values()) * 4 / POINTS
    per_batch = {k: 1e6 * v / batches for k, v in run_cpu.items()}  # µs of CPU per batch
    drain = max(o["drained"] for o in outs) - (start + SECONDS)
    window_at = start + WARMUP
    view = render(timeline.slots(lat, window_at, start + SECONDS), timeline.folds(window_at))
    view += "\n" + by_second(lat, start, start + SECONDS)
    (root / f"timeline-{gateways}.json").write_text(json.dumps(
        timeline.slots(lat, start, start + SECONDS + drain)))  # fmt: skip
    after_kill = lat[lat[:, 0] >= (killed_at or float("inf"))][:, 1] * 1000
    return {
        "gateways": gateways,
        "connect_s": connect_s,
        "batches_per_s": len(steady) / (SECONDS - WARMUP),
        "points_per_s": len(steady) * POINTS / (SECONDS - WARMUP),
        "p50": float(np.percentile(steady, 50)),
        "p99": float(np.percentile(steady, 99)),
        "max": float(steady.max()),
        "cores": cores,
        "rss": rss,
        "stored": stored,
        "sent": sum(records.values()) * 4,
        "unacked": sum(o["unacked"] for o in outs),
        "reconnects": sum(o["reconnects"] for o in outs),
        "problems": problems,
        "killed": killed_at is not None,
        "after_kill": (float(np.percentile(after_kill, 99)), float(after_kill.max()))
        if len(after_kill)
        else None,
        "load": (load_before, load_after),
        "per_batch": per_batch,
        "drain": drain,
        "pending": pending,
        "xacts_per_s": xacts / window,
        "timeline": view,
    }


@pytest.mark.timeout(3600)
def test_collector_streams(durable_pg: tuple[str, int]) -> None:
    url, postmaster = durable_pg
    root = Path(tempfile.mkdtemp(prefix="tp-bench-streams-"))
    speed = python_speed()  # before any load
    results = [
        run_config(root, url, postmaster, int(c.rstrip("k")), c.endswith("k")) for c in CONFIGS
    ]
    print(
        f"\n{STREAMS:,} streams x {POINTS} points/s, {SECONDS:.0f} s ({WARMUP:.0f} s warm-up),"
        f" {LOADERS} load generator processes ({CLIENT} client, {ACKS} acks),"
        f" machine: {os.cpu_count()} cores, {speed}"
    )
    for r in results:
        c, b = r["cores"], r["per_batch"]
        print(
            f"\n{r['gateways']} gateway(s){' (one killed halfway)' if r['killed'] else ''}:"
            f" {r['batches_per_s']:,.0f} batches/s = {r['points_per_s']:,.0f} points/s acked;"
            f" ack p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.0f} ms"
            f"\n  CPU (cores): gateways {c['gateways']:.2f}, PostgreSQL {c['postgres']:.2f},"
            f" load generators {c['load']:.2f}; gateway RSS {r['rss']} MiB"
            f"\n  CPU per batch over the whole run (µs): gateways {b['gateways']:.0f},"
            f" PostgreSQL {b['postgres']:.0f}, load generators {b['load']:.0f};"
            f" last ack {r['drain']:.1f} s after the last batch was due"
            f"\n  connecting the streams: {r['connect_s']:.1f} s; reconnects {r['reconnects']};"
            f" unacked at the end {r['unacked']}; loadavg {r['load'][0]} -> {r['load'][1]}"
            f"\n  rollup deltas not yet folded at the last ack: {r['pending']:,};"
            f" transactions {r['xacts_per_s']:,.0f}/s in the window"
            f" ({r['batches_per_s'] / max(r['xacts_per_s'], 1):.0f} batches each)"
            + (
                f"\n  batches sent after the kill: ack p99 {r['after_kill'][0]:.0f} ms,"
                f" max {r['after_kill'][1]:.0f} ms"
                if r["after_kill"]
                else ""
            )
            + f"\n  points sent {r['sent']:,}, stored {r['stored']:,};"
            f" problems: {r['problems'] or 'none'}\n{r['timeline']}"
        )
    for r in results:
        assert r["problems"] == [] and r["unacked"] == 0 and r["stored"] == r["sent"]
