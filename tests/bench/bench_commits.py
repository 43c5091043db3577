"""Benchmark: commits per second through the HTTP API into PostgreSQL.

One `tp serve` process (supervisor off: this measures the commit path, not container launches)
on a private, durable embedded PostgreSQL. Before each round, distinct previews are created
through the API, as many as the highest rate measured so far (a short replay run calibrates the
first round) times the run's seconds times ``--margin``; then wrk drives POST /v1/jobs with 64
connections, each request committing a different preview, never one twice (commit.lua's "once"
mode: a thread out of bodies stops instead of cycling into replays, and says so). Each round
checks new jobs = requests from the jobs table. In the same run, wrk measures GET /healthz on
the same server as the ceiling, and a replay run (every request the same, already-committed
triple) for the idempotent path.

Run: bash tests/bench/run.sh   (or: .venv/bin/python -m tests.bench.bench_commits --help)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres
from entrypoints.server import first_admin_token
from entrypoints.settings import Settings
from tests.fixtures.server import free_port
from tests.support.db import count_rows

HERE = Path(__file__).parent
TP = str(Path(sys.executable).parent / "tp")


def wrk(
    url: str, connections: int, seconds: int, script: list[str] | None = None
) -> dict[str, float]:
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", script[0], url, "--", *script[1:]]
    else:
        cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    exhausted = re.search(r"exhausted: (\d+)", out)
    created = re.search(r"created: (\d+)", out)
    lat = dict(re.findall(r"\s+(50|99)%\s+([\d.]+\w+)", out))
    return {
        "rps": rps,
        "requests": total,
        "non2xx": int(bad.group(1)) if bad else 0,
        "exhausted": int(exhausted.group(1)) if exhausted else 0,
        "created": int(created.group(1)) if created else 0,
        "p50": lat.get("50", "?"),
        "p99": lat.get("99", "?"),
    }


async def make_previews(url: str, token: str, count: int) -> list[dict[str, str]]:
    bodies: list[dict[str, str]] = []
    sem = asyncio.Semaphore(32)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:

        async def one(i: int) -> None:
            intent = {
                "experiment": "bench",
                "method": "custom/custom",
                "profile": "cpu:1",
                "params": {"command": f"echo {i}"},
            }
            async with sem:
                r = await c.post(f"{url}/v1/previews", json=intent)
            r.raise_for_status()
            p = r.json()
            bodies.append(
                {"preview_id": p["id"], "digest": p["digest"], "retry_key": str(uuid.uuid4())}
            )

        await asyncio.gather(*(one(i) for i in range(count)))
    return bodies


def _every_one_new(r: dict[str, float], connections: int) -> bool:
    """Each answered request of a distinct-previews run made a new job (201, none a replay of
    another), none was sent without a fresh preview, and the jobs table grew by exactly those
    plus at most one request per connection still in flight when wrk stopped (wrk does not
    count a request whose answer it did not read; the server commits it all the same)."""
    return (
        r["non2xx"] == 0
        and r["exhausted"] == 0
        and r["created"] == r["requests"]
        and 0 <= r["jobs"] - r["requests"] <= connections
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--margin",
        type=float,
        default=1.5,
        help="previews made before each round: this many times the highest rate measured so far"
        " times --seconds",
    )
    ap.add_argument("--previews", type=int, default=1000, help="at least this many per round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (health, commits, replays)")
    ap.add_argument("--seconds", type=int, default=8, help="duration of each wrk run")
    ap.add_argument("--connections", type=int, default=64)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="tp-bench-"))
    pg = EmbeddedPostgres(tmp / "pg", durable=True)
    url = pg.start()
    server = None
    try:
        migrate.upgrade(url)
        settings = dataclasses.replace(
            Settings.from_env(), database_url=url, state_dir=tmp / "state"
        )
        token = asyncio.run(first_admin_token(settings))
        assert token
        port = free_port()
        env = dict(
            os.environ,
            TUNEPLANE_DATABASE_URL=url,
            TUNEPLANE_STATE_DIR=str(tmp / "state"),
            TUNEPLANE_DB_POOL_SIZE=os.environ.get("TUNEPLANE_DB_POOL_SIZE", "20"),
        )
        log = (tmp / "serve.log").open("wb")
        server = subprocess.Popen(
            [TP, "serve", "--port", str(port), "--no-supervisor"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        api = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(api + "/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        lua = str(HERE / "commit.lua")
        replay_file = tmp / "replay.jsonl"
        replay = asyncio.run(make_previews(api, token, 1))
        replay_file.write_text(json.dumps(replay[0]) + "\n")
        calibration = wrk(api, args.connections, 2, [lua, str(replay_file), token, "2", "cycle"])
        rate = calibration["rps"]  # the highest rate measured so far, commits or replays
        made: list[tuple[int, float]] = []  # (previews, seconds) per round
        runs: list[tuple[str, dict[str, float]]] = []
        for n in range(args.rounds):  # interleaved, so drift hits every kind of run alike
            want = max(args.previews, math.ceil(rate * args.seconds * args.margin))
            t0 = time.perf_counter()
            mine = asyncio.run(make_previews(api, token, want))
            made.append((want, time.perf_counter() - t0))
            runs.append(
                ("GET /healthz (ceiling)", wrk(f"{api}/healthz", args.connections, args.seconds))
            )
            chunk = tmp / f"bodies-{n}.jsonl"
            chunk.write_text("".join(json.dumps(b) + "\n" for b in mine))
            before = asyncio.run(count_rows(url, "jobs"))
            r = wrk(api, args.connections, args.seconds, [lua, str(chunk), token, "2", "once"])
            r["jobs"] = asyncio.run(count_rows(url, "jobs")) - before
            r["previews"] = want
            runs.append(("POST /v1/jobs, distinct previews", r))
            again = wrk(
                api, args.connections, args.seconds, [lua, str(replay_file), token, "2", "cycle"]
            )
            runs.append(("POST /v1/jobs, replay of one", again))
            rate = max(rate, r["rps"], again["rps"])

        print(
            f"\ncalibration: replays at {calibration['rps']:.0f} req/s; previews made per round"
            f" (--margin {args.margin}):"
            + "".join(f" {k:,} in {s:.1f} s ({k / s:.0f}/s);" for k, s in made)
        )
        print(
            f"{'run':<34}{'req/s':>10}{'requests':>10}{'non-2xx':>9}"
            f"{'p50':>10}{'p99':>10}{'previews':>10}{'new jobs':>10}"
        )
        short = []
        for name, r in runs:
            print(
                f"{name:<34}{r['rps']:>10.0f}{r['requests']:>10.0f}{r['non2xx']:>9.0f}"
                f"{r['p50']:>10}{r['p99']:>10}{r.get('previews', ''):>10}{r.get('jobs', ''):>10}"
            )
            if "jobs" in r and not _every_one_new(r, args.connections):
                short.append(r)
        print(
            f"\nmedian over {args.rounds} rounds; ratio to the ceiling measured in the same rounds:"
        )
        ceiling = statistics.median(r["rps"] for n, r in runs if n.startswith("GET"))
        for name in dict(runs):
            med = statistics.median(r["rps"] for n, r in runs if n == name)
            print(f"  {name:<34}{med:>8.0f} req/s  {med / ceiling:>6.3f} of the ceiling")
        for _, r in runs:
            if "jobs" in r:
                print(
                    f"distinct previews: {r['requests']:.0f} requests answered, {r['created']:.0f}"
                    f" of them 201 Created; {r['jobs']:.0f} new jobs = those"
                    f" + {r['jobs'] - r['requests']:.0f} in flight when wrk stopped;"
                    f" {r['exhausted']:.0f} sent after the previews ran out"
                )
        if short:
            print("NOT every request made a new job (raise --margin if the previews ran out)")
        else:
            print("every distinct-previews request made a new job (new jobs = requests)")
        return 1 if short else 0
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
