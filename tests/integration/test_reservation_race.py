"""Two schedulers in two processes, no leader lease, racing to reserve 1,000 pending jobs of
mixed sizes (1 and 2 GPUs, a whole node, two whole nodes) on 50 nodes × 8 GPUs: the database
alone keeps the fleet consistent. Checked from the tables, while they race and afterwards:
no GPU in two reservations, every node's used counters equal to the sums of its reserved
members, every reservation the whole envelope of its job (no partial gang)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork
from domain.fleet import Node, Pool, Queue, Team
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.requests import resolve_roles
from tests.contract.builders import a_spec
from tests.support.db import plain_dsn

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POOL = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")
NODES = 50
JOBS = 1_000
RACERS = 2
SHAPES = ("h200:1", "h200:2", "h200", "h200:16")


async def seed(url: str) -> None:
    engine = create_engine(url, pool_size=2)
    roles = {s: resolve_roles([s], [POOL], []) for s in SHAPES}
    t0 = datetime(2026, 12, 3, tzinfo=UTC)
    try:
        async with PostgresUnitOfWork(engine) as uow:
            await uow.policy.put_team(Team("t"))
            await uow.policy.put_queue(Queue("default", "t"))
            await uow.policy.put_queue(Queue("high", "t", priority=1))
            await uow.fleet.put_pool(POOL)
            for i in range(NODES):
                await uow.fleet.put_node(Node(f"a-{i:02d}", "a"))
            for i in range(JOBS):
                queue = "high" if i % 5 == 0 else "default"
                spec = a_spec(roles=roles[SHAPES[i % len(SHAPES)]], source=None, queue=queue)
                at = t0 + timedelta(milliseconds=i)
                job = Job(f"job-{i:04d}", f"pv-{i:04d}", "alice", spec, JobState.PENDING, at, at)
                await uow.jobs.add(job)
            await uow.commit()
    finally:
        await engine.dispose()


# every reserved GPU as a row (node, GPU index, attempt): the members' sets of GPU numbers
GPUS = (
    "SELECT m.node, i - m.node_slot * 64 AS i, m.attempt_id FROM reservation_members m "
    "CROSS JOIN LATERAL unnest(m.gpus) AS x CROSS JOIN LATERAL generate_series(lower(x), "
    "upper(x) - 1) AS i"
)

# Each query is one statement: one consistent view, even while the racers commit.
BROKEN = {
    "a GPU in two reservations": (
        f"SELECT g.node, g.i FROM ({GPUS}) g GROUP BY 1, 2 HAVING count(*) > 1"
    ),
    "a GPU reserved outside its member's node": (
        "SELECT m.attempt_id, m.member FROM reservation_members m JOIN nodes n ON n.name = m.node "
        "WHERE n.slot <> m.node_slot OR NOT m.gpus <@ int4range(n.slot * 64, n.slot * 64 + 8)"
    ),
    "used counters that differ from the reserved members": (
        "SELECT n.name, n.used_mcpu, n.used_memory_mb, s.mcpu, s.memory_mb FROM nodes n "
        "LEFT JOIN (SELECT node, sum(mcpu) AS mcpu, sum(memory_mb) AS memory_mb "
        "           FROM reservation_members GROUP BY node) s ON s.node = n.name "
        "WHERE n.used_mcpu <> coalesce(s.mcpu, 0) "
        "   OR n.used_memory_mb <> coalesce(s.memory_mb, 0)"
    ),
    "a node over its capacity": (
        "SELECT name FROM nodes WHERE used_mcpu > mcpu OR used_memory_mb > memory_mb "
        f"OR (SELECT count(*) FROM ({GPUS}) g WHERE g.node = nodes.name) > 8"
    ),
    "a partial gang": (
        "SELECT r.attempt_id FROM reservations r JOIN jobs j ON j.id = r.job_id "
        "WHERE (SELECT count(*) FROM reservation_members m WHERE m.attempt_id = r.attempt_id)"
        "   <> (SELECT sum((x->>'members')::int) FROM jsonb_array_elements(j.spec->'roles') x)"
        f" OR (SELECT count(*) FROM ({GPUS}) g WHERE g.attempt_id = r.attempt_id)"
        "   <> (SELECT sum((x->>'members')::int * (x->'resources'->>'gpus')::int)"
        "       FROM jsonb_array_elements(j.spec->'roles') x)"
        " OR (SELECT count(*) FROM members m WHERE m.attempt_id = r.attempt_id)"
        "   <> (SELECT count(*) FROM reservation_members m WHERE m.attempt_id = r.attempt_id)"
    ),
    "a job with two live reservations": (
        "SELECT job_id FROM reservations GROUP BY job_id HAVING count(*) > 1"
    ),
}


async def broken(conn: asyncpg.Connection) -> dict[str, list[tuple[object, ...]]]:
    found = {}
    for what, sql in BROKEN.items():
        rows = await conn.fetch(sql)
        if rows:
            found[what] = [tuple(r) for r in rows[:5]]
    return found


def start(url: str, share: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.reservation_racer", url, str(share), str(RACERS)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


async def test_racing_schedulers_never_double_book(
    pg_url: str, record_property: Callable[[str, object], None]
) -> None:
    await seed(pg_url)
    racers = [start(pg_url, share) for share in range(RACERS)]
    conn = await asyncpg.connect(plain_dsn(pg_url))
    checks = 0
    try:
        for proc in racers:  # go
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        deadline = time.monotonic() + 180
        while any(p.poll() is None for p in racers) and time.monotonic() < deadline:
            assert await broken(conn) == {}
            checks += 1
            await asyncio.sleep(0.1)
        outcomes = []
        for proc in racers:
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0
            outcomes.append(json.loads(out.strip().splitlines()[-1]))

        assert await broken(conn) == {}
        live = await conn.fetchval("SELECT count(*) FROM reservations")
        pending = await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'pending'")
        assert pending == 0  # every job was placed once
        assert sum(o["reserved"] for o in outcomes) == JOBS
        assert sum(o["released"] for o in outcomes) == JOBS - live
    finally:
        await conn.close()
        for proc in racers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    conflicts = sum(o["conflicts"] for o in outcomes)
    record_property("conflicts", conflicts)
    record_property("racers", json.dumps(outcomes))
    print(f"\nreservation race: {conflicts} conflicts, {checks} checks while racing; {outcomes}")
