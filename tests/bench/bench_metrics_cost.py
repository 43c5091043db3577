"""The cost of TunePlane's own metrics, in one run (not part of the suite): commits per second
and telemetry ingest points per second while every process's ``/metrics`` is scraped once a
second, as a ratio to the same work with no scraping (goal: >= 0.97 each).

Commits: one `tp serve` (supervisor off), distinct previews made beforehand; wrk drives
``POST /v1/jobs`` (tests/bench/commit.lua, 64 connections) in runs alternating plain and
scraped (ABBA order, so drift hits both alike); the ratio is of the medians. Ingest: as
tests/bench/bench_telemetry_ingest.py (8 collectors → `tp gateway telemetry` → PostgreSQL),
each round with fresh members, alternating plain and scraped rounds; scraped rounds give the
gateway and every collector a metrics port and scrape all nine once a second.

The processes are instrumented in both arms (the measurements are always taken): what is
measured is what scraping adds, plus the instruments themselves against the figures of
docs/benchmarks.md's earlier runs (the same benchmarks without instruments).

Run: ``.venv/bin/pytest tests/bench/bench_metrics_cost.py -m bench -s`` (wrk installed; a
container engine for the previews' runtime pin). ``BENCH_SECONDS`` (wrk run, default 6),
``BENCH_ROUNDS`` (pairs of runs, default 2), ``BENCH_PREVIEWS`` (previews per second
of a wrk run, default 400: more than it commits here), ``BENCH_RECORDS`` (per member and
round, default 31,250: 1,000,000 points a round).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres
from entrypoints.server import first_admin_token
from entrypoints.settings import Settings
from tests.bench.bench_commits import HERE, TP, make_previews, wrk
from tests.fixtures.server import free_port
from tests.support.db import count_rows
from tests.support.telemetry_rig import TAGS, Rig

pytestmark = pytest.mark.bench

SECONDS = int(os.environ.get("BENCH_SECONDS", "6"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))  # each: a plain and a scraped run
PREVIEWS_PER_SECOND = int(os.environ.get("BENCH_PREVIEWS", "400"))  # above the commit rate
RECORDS = int(os.environ.get("BENCH_RECORDS", "31250"))
MEMBERS = 8


@contextmanager
def scraping(urls: list[str], every: float = 1.0) -> Iterator[list[int]]:
    """Scrape every URL once per ``every`` seconds in a thread until the block ends; yields the
    count of scrapes made (checked: a scrape that fails fails the benchmark)."""
    done, count, errors = threading.Event(), [0], []

    def loop() -> None:
        with httpx.Client(timeout=10) as client:
            while not done.is_set():
                start = time.monotonic()
                for url in urls:
                    try:
                        client.get(url).raise_for_status()
                        count[0] += 1
                    except httpx.HTTPError as exc:
                        errors.append(f"{url}: {exc}")
                done.wait(max(0.0, every - (time.monotonic() - start)))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        done.set()
        thread.join(15)
    assert not errors, errors[:3]


def _arms(rounds: int) -> list[bool]:
    """ABBA...: False (plain), True (scraped); ``rounds`` pairs."""
    return [bool((n + n // 2) % 2) for n in range(rounds * 2)]


@pytest.mark.timeout(1800)
def test_commits_per_second_scraped_against_plain(tmp_path: Path, docker_host: str) -> None:
    # fsync on, as bench_commits.py; not under tmp_path: PostgreSQL runs as user postgres, who
    # needs search permission on every parent (tests/e2e/conftest.py says why)
    pg = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="tp-bench-metrics-")) / "pg", durable=True)
    pg_url = pg.start()
    try:
        migrate.upgrade(pg_url)
        _commits(tmp_path, pg_url, docker_host)
    finally:
        pg.stop()


def _commits(tmp_path: Path, pg_url: str, docker_host: str) -> None:
    state = tmp_path / "state"
    settings = dataclasses.replace(
        Settings.from_env(), database_url=pg_url, state_dir=state, docker_host=docker_host
    )
    token = asyncio.run(first_admin_token(settings))
    assert token
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        TUNEPLANE_DATABASE_URL=pg_url, TUNEPLANE_STATE_DIR=str(state), DOCKER_HOST=docker_host
    )
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [TP, "serve", "--port", str(port), "--no-supervisor"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(api + "/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        arms = _arms(ROUNDS)
        t0 = time.monotonic()
        bodies = asyncio.run(make_previews(api, token, PREVIEWS_PER_SECOND * SECONDS * len(arms)))
        print(f"\n{len(bodies)} previews made in {time.monotonic() - t0:.0f} s")
        per_run = len(bodies) // len(arms)
        lua = str(HERE / "commit.lua")
        results: dict[bool, list[float]] = {False: [], True: []}
        scrapes = 0
        for n, scraped in enumerate(arms):
            chunk = tmp_path / f"bodies-{n}.jsonl"
            mine = bodies[n * per_run : (n + 1) * per_run]
            chunk.write_text("".join(json.dumps(b) + "\n" for b in mine))
            before = asyncio.run(count_rows(pg_url, "jobs"))
            with scraping([api + "/metrics"]) if scraped else _nothing() as count:
                r = wrk(api, 64, SECONDS, [lua, str(chunk), token, "2"])
            scrapes += count[0]
            jobs = asyncio.run(count_rows(pg_url, "jobs")) - before
            assert r["non2xx"] == 0, r
            assert jobs < per_run, "every preview was committed: raise BENCH_PREVIEWS"
            results[scraped].append(jobs / SECONDS)  # new jobs only, never a replay
    finally:
        server.terminate()
        server.wait(10)
    plain, scraped_rps = statistics.median(results[False]), statistics.median(results[True])
    print(
        f"\ncommits/s, {len(arms)} wrk runs of {SECONDS} s (64 connections), ABBA order:"
        f"\n  plain:   {', '.join(f'{x:.0f}' for x in results[False])} -> median {plain:.0f}"
        f"\n  scraped: {', '.join(f'{x:.0f}' for x in results[True])} -> median"
        f" {scraped_rps:.0f} ({scrapes} scrapes of /metrics)"
        f"\n  scraped/plain = {scraped_rps / plain:.3f}"
    )


async def _ingest_round(
    root: Path, pg_url: str, pg_engine: AsyncEngine, scraped: bool
) -> tuple[float, int]:
    """One round's points/s, and the scrapes made."""
    ports = {i: free_port() for i in range(MEMBERS)} if scraped else {}
    gateway_metrics = free_port()
    rig = Rig(root, pg_url)
    if scraped:
        rig.extra_env["TUNEPLANE_TELEMETRY_GATEWAY_METRICS_PORT"] = str(gateway_metrics)
    await rig.add_members(pg_engine, MEMBERS)
    rig.write(RECORDS)
    staged = [m.path.rename(root / f"staged-{i}") for i, m in enumerate(rig.members)]
    urls = [f"http://127.0.0.1:{p}/metrics" for p in [gateway_metrics, *ports.values()]]
    try:
        rig.start_gateway()
        for i in range(MEMBERS):
            rig.start_collector(i, *(["--metrics-port", str(ports[i])] if scraped else []))
        await _started(rig)  # gateway and collectors started and idle before the clock
        base = await rig.stored()  # the earlier rounds' points, in the same database
        with scraping(urls) if scraped else _nothing() as count:
            t0 = time.perf_counter()
            for m, path in zip(rig.members, staged, strict=True):
                path.rename(m.path)
            while await rig.stored() < base + rig.expected():
                await asyncio.sleep(0.02)
                assert time.perf_counter() - t0 < 600, f"not stored in 600 s: see {root}"
            took = time.perf_counter() - t0
    finally:
        rig.stop()
    return MEMBERS * RECORDS * len(TAGS) / took, count[0]


async def _started(rig: Rig, within: float = 300) -> None:
    """Until the gateway listens and every collector runs (their logs say so; the same wait in
    both arms), then a second more."""
    logs = {rig.root / "gateway.log": "telemetry gateway on"}
    logs |= {rig.root / f"collector-{i}.log": "collecting members of" for i in range(MEMBERS)}
    deadline = time.monotonic() + within
    while not all(p.exists() and text in p.read_text() for p, text in logs.items()):
        assert time.monotonic() < deadline, f"not started in {within} s: see {rig.root}"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)


@contextmanager
def _nothing() -> Iterator[list[int]]:
    yield [0]


@pytest.mark.timeout(1800)
async def test_ingest_points_per_second_scraped_against_plain(
    tmp_path: Path, pg_url: str, pg_engine: AsyncEngine
) -> None:
    results: dict[bool, list[float]] = {False: [], True: []}
    scrapes = 0
    for n, scraped in enumerate(_arms(ROUNDS)):
        rate, count = await _ingest_round(tmp_path / f"r{n}", pg_url, pg_engine, scraped)
        results[scraped].append(rate)
        scrapes += count
    plain, scraped_rate = statistics.median(results[False]), statistics.median(results[True])
    points = MEMBERS * RECORDS * len(TAGS)
    print(
        f"\ningest points/s, {points:,} points a round, ABBA order:"
        f"\n  plain:   {', '.join(f'{x:,.0f}' for x in results[False])} -> median {plain:,.0f}"
        f"\n  scraped: {', '.join(f'{x:,.0f}' for x in results[True])} -> median"
        f" {scraped_rate:,.0f} ({scrapes} scrapes of 9 processes)"
        f"\n  scraped/plain = {scraped_rate / plain:.3f}"
    )


async def test_cpu_cost_of_instruments_and_scrapes_in_process(tmp_path: Path) -> None:
    """What the end-to-end runs above cannot resolve on a busy machine, measured as CPU time
    in one process: (1) a request through the API app with the request middleware against the
    same app without it (``GET /healthz``, in-process ASGI, alternating blocks); (2) one scrape
    of a registry holding what a busy API process holds (60 routes x 3 methods x 3 classes,
    a latency histogram per route, the scheduler's gauges for 50 queues and 20 pools)."""
    from adapters.observability.prometheus import PrometheusInstruments
    from application import instruments as i
    from entrypoints.api.app import create_app
    from entrypoints.api.instrumentation import instrumented
    from tests.support.context import memory_context

    app = create_app(memory_context(tmp_path), supervise=False)
    wrapped = instrumented(app)
    n, blocks = 2000, 6
    spent: dict[bool, list[float]] = {False: [], True: []}
    for b in range(blocks):
        with_it = bool(b % 2)
        transport = httpx.ASGITransport(app=wrapped if with_it else app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            t0 = time.process_time()
            for _ in range(n):
                await client.get("/healthz")
            spent[with_it].append((time.process_time() - t0) / n)
    plain, measured = statistics.median(spent[False]), statistics.median(spent[True])

    registry = PrometheusInstruments()
    for r in range(60):
        for method in ("GET", "POST", "DELETE"):
            for status in ("2xx", "4xx", "5xx"):
                registry.inc(i.HTTP_REQUESTS, route=f"/v1/r{r}/{{id}}", method=method,
                             status=status)  # fmt: skip
        registry.observe(i.HTTP_SECONDS, 0.01, route=f"/v1/r{r}/{{id}}")
    registry.replace(i.PENDING_JOBS, {f"q{q}": q for q in range(50)})
    registry.replace(i.FREE_GPUS, {f"p{p}": p for p in range(20)})
    t0 = time.process_time()
    for _ in range(200):
        size = len(registry.exposition())
    scrape = (time.process_time() - t0) / 200
    print(
        f"\nCPU per GET /healthz in-process: {plain * 1e6:.0f} us plain, {measured * 1e6:.0f} us"
        f" with the request middleware ({(measured - plain) * 1e6:+.0f} us;"
        f" plain/measured = {plain / measured:.3f}; medians of {blocks // 2} blocks of {n})"
        f"\nCPU per scrape of a busy API registry ({size:,} bytes): {scrape * 1e3:.2f} ms"
        f" = {scrape:.4f} of one core at one scrape a second"
    )
