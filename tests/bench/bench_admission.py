"""Admission benchmark: 10,000 pending jobs over 1,000 nodes.

Measures, on the in-memory adapters and on PostgreSQL (a private embedded server):
  * one admission pass as the leader runs it (``Scheduler``: it keeps the pending jobs between
    passes and reads only what changed), after ``--arrivals`` jobs were committed since its
    previous read: the read, ``decide`` and storing the reservations, each timed; the first
    read after a start (every pending job) apart, with the resident memory its view took.
    This first pass that fills the empty fleet is *cold*: the server and the scheduler have
    just started, the store's connection has never run the store's statements, the tables
    were filled a moment ago and never analyzed;
  * on PostgreSQL, the same fill pass again by a leader that has been running: the first
    pass's reservations released and its jobs pending again (not timed), then what a server
    past its start has done (``--running-prep``: by default VACUUM ANALYZE, autovacuum's work,
    and a CHECKPOINT, so the pass pays the full-page images a running server pays), an
    untimed read (the leader's pass before, which reads those jobs back), then one pass
    making the same placements on the connection the first one used;
  * for each timed pass on PostgreSQL, the server's CPU in the store by process (the
    backends, autovacuum, the WAL writer, ...: ``pg_probe.py``), the WAL it wrote (records,
    full-page images) and whether the store's tables had been analyzed;
  * the steady pass: the fleet full after that pass, ``--ending`` of its jobs end (their
    reservations released) and ``--arrivals`` more are committed, then one pass over the
    10,000-odd pending jobs, timed the same way: what a leader's pass costs once the fleet is
    busy, the common case (the pass above, which fills an empty fleet, is the worst);
  * jobs admitted per second when draining the whole queue: passes run until every job was
    reserved; between passes the reserved jobs "finish" (their reservations are released,
    not timed);
  * for the drain's passes that store 500 placements or more, the store per placement (median
    and best: robust on a shared machine) and, on PostgreSQL, each of its two statements timed
    from the client;
  * a baseline in the same run: ``decide`` alone (the pure function over the same snapshot),
    and for PostgreSQL a raw asyncpg COPY of as many reserved-GPU rows, so each figure is a
    ratio against something measured on the same machine at the same moment.

Run: ``bash tests/bench/run_admission.sh`` (``--help`` for the options; ``--webhook`` adds one
webhook that wants every change of every job, so the timeline's outbox trigger writes a row per
event). ``--explain FILE``
logs the plans and trigger times of every statement of 50 ms or more (``auto_explain``; needs
a server with contrib: ``TUNEPLANE_PG_BIN=/usr/lib/postgresql/15/bin``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from adapters.memory import MemoryStore, MemoryUnitOfWork
from adapters.sim.clock import CountingIds, SimClock
from application.context import Context
from application.overlap import overlapped
from application.scheduler import OVERLAP_EVERY, Scheduler, collector_paused
from domain.admission import decide
from domain.auth import Role, User
from domain.catalog import Catalog, RuntimePin
from domain.fleet import Node, Pool, Queue, Team
from domain.jobs import Job
from domain.lifecycle import JobState
from domain.requests import resolve_roles
from domain.submission import JobSpec
from domain.unit_of_work import UnitOfWorkFactory
from tests.bench.admission_postgres import (
    CALLS,
    PROBE,
    RUNNING_PREP,
    STATEMENTS,
    copy_baseline,
    pending_again,
    postgres,
    server_cpu,
    server_cpu_kinds,
    store_detail,
    tables_now,
    wal_mark,
    wal_since,
)
from tests.bench.admission_report import (
    CPU_PARTS,
    RUNNING_PREP_TEXT,
    STORE_DETAIL,
    Figures,
    Steady,
    load,
    python_speed,
    report,
    rss_mb,
)
from tests.bench.pg_probe import cpu_delta

T0 = datetime(2026, 12, 3, tzinfo=UTC)
POOL = Pool("a", "bench", "local", 8, 96, 1_048_576, "h200")
SHAPES = [("h200:1", 30), ("h200:2", 20), ("h200:4", 15), ("h200:8", 20), ("h200:16", 10),
          ("h200:32", 5)]  # fmt: skip
QUEUES = [Queue(f"q{i}", "bench", priority=i % 3) for i in range(8)]
PIN = RuntimePin("busybox", "busybox:1", "sha256:" + "0" * 64, None, "single-process")


def make_ctx(uow: UnitOfWorkFactory) -> Context:
    return Context(
        uow=uow,
        clock=SimClock(T0),
        ids=CountingIds(),
        catalog=Catalog(methods=()),
        backends={},
        blobs=None,  # not used by scheduling
        new_secret=lambda: "x",
    )


def workload(jobs: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    names = [s for s, _ in SHAPES]
    weights = [w for _, w in SHAPES]
    roles = {s: resolve_roles([s], [POOL], []) for s in names}
    out = []
    for i in range(jobs):
        shape = rng.choices(names, weights)[0]
        spec = JobSpec("bench", "custom/custom", {"command": "true"}, ("true",), PIN, "local",
                       QUEUES[i % len(QUEUES)].name, roles[shape], None, {})  # fmt: skip
        at = T0 + timedelta(milliseconds=i)
        out.append(Job(f"job-{i:06d}", f"pv-{i:06d}", "bench", spec, JobState.PENDING, at, at))
    return out


async def populate(uow: UnitOfWorkFactory, nodes: int, jobs: list[Job]) -> None:
    async with uow() as u:
        await u.policy.put_team(Team("bench"))
        await u.policy.put_user(User("bench", Role.MEMBER, ("bench",)))
        for q in QUEUES:
            await u.policy.put_queue(q)
        await u.fleet.put_pool(POOL)
        for i in range(nodes):
            await u.fleet.put_node(Node(f"a-{i:04d}", "a"))
        await u.commit()
    await add_jobs(uow, jobs)


async def add_jobs(uow: UnitOfWorkFactory, jobs: list[Job]) -> None:
    for start in range(0, len(jobs), 1000):
        async with uow() as u:
            for job in jobs[start : start + 1000]:
                await u.jobs.add(job)
            await u.commit()


async def finish_reserved(uow: UnitOfWorkFactory, count: int | None = None) -> None:
    """Not timed: every reservation (or the first ``count``) is released, as if its job had
    ended."""
    async with uow() as u:
        for r in (await u.reservations.live())[:count]:
            await u.reservations.release(r.attempt_id)
        await u.commit()


NO_DRAIN = False  # --no-drain: stop after the two timed passes (A/B runs of a pass)
PAUSE_GC = True  # the timed passes run with the garbage collector paused, as pass_once does


async def timed_pass(sched: Scheduler, label: str) -> tuple[float, float, float, list[str]]:
    """One ``pass_once`` in its parts: read, ``decide`` (timed alone again over the same
    snapshot, the same decisions), store; and the jobs it reserved. With ``sched.overlap``
    (the scheduler's default) decide and the store run at once (application/overlap.py): the
    store's part is then what the pass took beyond read and ``decide`` alone. The CPU seconds
    of each part, this process's and PostgreSQL's, go to ``CPU_PARTS``."""
    collections = sum(g["collections"] for g in gc.get_stats())
    STATEMENTS.clear()
    CALLS.clear()
    mark = await wal_mark()  # outside the timed part: a query on the probe's connection
    with collector_paused() if PAUSE_GC else contextlib.nullcontext():  # as pass_once
        c0, k0, t0 = time.process_time(), server_cpu_kinds(), time.perf_counter()
        snapshot, attempts = await sched.read()
        c1, k1, t1 = time.process_time(), server_cpu_kinds(), time.perf_counter()
        if sched.overlap:
            decisions, reserved, _ = await overlapped(sched, snapshot, attempts)
        else:
            decisions = decide(snapshot, explain_waits=False)
            reserved, _ = await sched.apply(decisions.placements, attempts)
        c2, k2, t2 = time.process_time(), server_cpu_kinds(), time.perf_counter()
    wal = await wal_since(mark)
    s0, s1, s2 = (sum(k.values()) for k in (k0, k1, k2))
    collections = sum(g["collections"] for g in gc.get_stats()) - collections
    g0 = time.process_time()
    gc.collect()  # what the pass left to collect (paused: the collections it deferred)
    collected = time.process_time() - g0
    with collector_paused() if PAUSE_GC else contextlib.nullcontext():
        d0, dc = time.perf_counter(), time.process_time()
        again = decide(snapshot, explain_waits=False)  # the same work, timed alone
        decide_s, decide_cpu = time.perf_counter() - d0, time.process_time() - dc
    assert again.placements == decisions.placements
    parts = {"read": c1 - c0, "read_pg": s1 - s0, "decide": decide_cpu}
    parts |= {"decide_store": c2 - c1, "store_pg": s2 - s1, "placed": len(reserved),
              "collections": collections, "collected": collected}  # fmt: skip
    detail = store_detail(cpu_delta(k1, k2), wal, dict(CALLS), await tables_now())
    detail += f"\n  read's server CPU by process: {cpu_delta(k0, k1)}"
    STORE_DETAIL.append((label, detail))
    CPU_PARTS.append((label, parts))
    for job_id in reserved:
        sched._view.drop(job_id)
    return t1 - t0, decide_s, t2 - t1 - decide_s, list(reserved)


async def measure(
    uow: UnitOfWorkFactory,
    limit: int,
    arrivals: list[Job],
    batch: int = 2_000,
    later: Sequence[Job] = (),
    ending: int = 0,
    store_groups: int = 1,
    overlap: int = OVERLAP_EVERY,
    pending_again: Callable[[list[str]], Awaitable[None]] | None = None,
) -> Figures:
    """The fill pass as the leader runs it: the scheduler has read the queue before (its
    first read, timed apart as the cost of a start), then ``arrivals`` are committed, then one
    ``pass_once`` (its read, ``decide`` and the store, each timed). With ``pending_again``
    (PostgreSQL), the same fill pass once more as a leader that has been running makes it:
    the reservations released, the jobs it placed pending again (``pending_again``, which
    also runs what a server past its start has done: ``--running-prep``), read back by an
    untimed read (the leader's pass before), then one more pass, timed the same way. Then
    the steady pass, then the drain."""
    ctx = make_ctx(uow)
    sched = Scheduler(
        ctx, snapshot_limit=limit, batch=batch, store_groups=store_groups, overlap=overlap
    )
    gc.collect()
    before = rss_mb()
    t = time.perf_counter()
    await sched.decide()  # the first read after a start: every pending job
    cold = time.perf_counter() - t
    view = rss_mb() - before
    await add_jobs(uow, arrivals)
    read_s, decide_s, apply_s, reserved = await timed_pass(sched, "fill pass, cold")
    first = Figures(
        cold, read_s, decide_s, apply_s, len(reserved), len(reserved),
        read_s + decide_s + apply_s, 1, view, 0.0,
    )  # fmt: skip
    if pending_again is not None:  # the same fill pass by a leader that has been running
        await finish_reserved(uow)
        await pending_again(reserved)
        await sched.read()  # the leader's pass before (untimed) read them back into its view
        read_s, decide_s, apply_s, placed = await timed_pass(sched, "fill pass, running leader")
        first.running = Steady(0, len(reserved), read_s, decide_s, apply_s, len(placed))
        first.drained += len(placed) - len(reserved)
        first.passes += 1
    if later:  # the fleet is full now: a few jobs end, a few more arrive, one more pass
        await finish_reserved(uow, ending)
        await add_jobs(uow, list(later))
        read_s, decide_s, apply_s, placed = await timed_pass(sched, "steady pass")
        first.steady = Steady(ending, len(later), read_s, decide_s, apply_s, len(placed))
        first.drained += len(placed)
        first.drain_s += read_s + decide_s + apply_s
        first.passes += 1
    if NO_DRAIN:  # --no-drain: the two timed passes only
        first.rss_mb = rss_mb("VmHWM")
        return first
    await finish_reserved(uow)
    store = sched.store
    spent = [0.0, 0.0, 0.0]  # this pass's stores: wall, this process's CPU, PostgreSQL's CPU

    async def timed_store(placements: Any, attempts: Any) -> Any:
        # overlapped, a store's span also holds the decide steps run meanwhile (client CPU)
        c, s, t = time.process_time(), server_cpu(), time.perf_counter()
        out = await store(placements, attempts)
        spent[0] += time.perf_counter() - t
        spent[1] += time.process_time() - c
        spent[2] += server_cpu() - s
        return out

    sched.store = timed_store  # type: ignore[method-assign]
    while True:
        STATEMENTS.clear()
        spent[:] = [0.0, 0.0, 0.0]
        t = time.perf_counter()
        result = await sched.pass_once()
        first.drain_s += time.perf_counter() - t
        if len(result.reserved) >= 500:
            first.stores.append((spent[0], len(result.reserved)))
            first.statements.append(dict(STATEMENTS))
            first.cpu.append((spent[1], spent[2]))
        first.passes += 1
        first.drained += len(result.reserved)
        if not result.reserved:
            first.rss_mb = rss_mb("VmHWM")
            return first
        await finish_reserved(uow)


async def one_job_first(
    factory: Callable[[], Any], then: Callable[[list[str]], Awaitable[None]], ids: list[str]
) -> None:
    """``--one-job-first``: ``then(ids)``, then on the pool's connection its cached plans
    dropped (``DISCARD PLANS``) and one job updated, rolled back: the plans the connection's
    triggers keep are made for a one-row statement, as on a pooled connection whose last
    replanning happened at a cancel or a supervisor's step (migration 0039)."""
    await then(ids)
    async with factory() as uow:  # never committed: rolled back
        conn = uow._conn
        await conn.execute(text("DISCARD PLANS"))
        await conn.execute(text("UPDATE jobs SET updated_at = updated_at WHERE id = :id"),
                           {"id": ids[0]})  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    every = workload(args.jobs + 2 * args.arrivals, args.seed)
    jobs = every[: args.jobs]
    arrivals, later = (
        every[args.jobs : args.jobs + args.arrivals],
        every[args.jobs + args.arrivals :],
    )
    print(f"machine: {os.cpu_count()} cores, {python_speed()}; load average before: {load()}")
    if "memory" in args.adapters:
        store = MemoryStore()
        factory: Callable[[], MemoryUnitOfWork] = lambda: MemoryUnitOfWork(store)  # noqa: E731
        await populate(factory, args.nodes, jobs)
        f = await measure(factory, args.limit, arrivals, 100, later, args.ending, 1, args.overlap)
        report("in-memory adapters", f, args.jobs, args.nodes, args.arrivals)
    if "postgres" in args.adapters:
        with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
            pg = postgres(Path(tmp), args.explain, args.webhook, args.schema)
            async with pg as (pg_factory, url):
                await populate(pg_factory, args.nodes, jobs)
                for statement in args.prepare:  # e.g. ANALYZE, CHECKPOINT (probe's connection)
                    await PROBE[0].conn.execute(statement)
                prep = RUNNING_PREP if args.running_prep is None else args.running_prep
                RUNNING_PREP_TEXT[0] = "; ".join(prep) or "nothing run"
                again = None if args.no_running else functools.partial(pending_again, prep=prep)
                if again is not None and args.one_job_first:
                    again = functools.partial(one_job_first, pg_factory, again)
                f = await measure(pg_factory, args.limit, arrivals, 2_000, later, args.ending,
                                  args.store_groups, args.overlap, again)  # fmt: skip
                report("PostgreSQL adapter", f, args.jobs, args.nodes, args.arrivals)
                if NO_DRAIN:
                    return
                gpus = sum(j.spec.gpus for j in every)
                base = await copy_baseline(url, gpus)
                print(f"baseline: raw asyncpg COPY of {gpus} reserved-GPU rows: "
                      f"{base * 1000:.0f} ms ({gpus / base:,.0f} rows/s); admission drain "
                      f"stores {gpus / f.drain_s:,.0f} GPU reservations/s, ratio "
                      f"{(gpus / f.drain_s) / (gpus / base):.3f}")  # fmt: skip
    print(f"load average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=int, default=20_000, help="snapshot limit")
    parser.add_argument(
        "--arrivals", type=int, default=100, help="jobs committed between the two reads"
    )
    parser.add_argument(
        "--ending",
        type=int,
        default=13,
        help="jobs that end before the steady pass (13: about 1 %% of what the first placed)",
    )
    parser.add_argument("--adapters", nargs="+", default=["memory", "postgres"])
    parser.add_argument(
        "--explain",
        type=Path,
        help="log every PostgreSQL statement of 50 ms or more with its plan and trigger "
        "times (auto_explain) and copy the server log to this file",
    )
    parser.add_argument(
        "--webhook",
        action="store_true",
        help="PostgreSQL: one webhook wants every job's changes (an outbox row per event)",
    )
    parser.add_argument(
        "--store-groups",
        type=int,
        default=1,
        help="PostgreSQL: store each pass in this many node-disjoint groups at once "
        "(Scheduler.store_groups; the pool has 4 connections)",
    )
    parser.add_argument(
        "--overlap",
        type=int,
        default=OVERLAP_EVERY,
        help="store while deciding: decide yields to the store every N jobs (Scheduler.overlap; "
        "0: decide the whole pass, then store it)",
    )
    parser.add_argument(
        "--no-drain", action="store_true", help="stop after the fill pass and the steady pass"
    )
    parser.add_argument(
        "--collect-in-pass",
        action="store_true",
        help="leave Python's garbage collector on during the timed passes (as before session 42)",
    )
    parser.add_argument(
        "--schema",
        default="head",
        help="PostgreSQL: migrate only to this revision (an A/B of a schema change, e.g. 0034)",
    )
    parser.add_argument(
        "--prepare",
        action="append",
        default=[],
        help="PostgreSQL: SQL run once after the jobs are added, before the scheduler starts "
        "(e.g. ANALYZE, CHECKPOINT; repeatable): what a server past its start has done",
    )
    parser.add_argument(
        "--running-prep",
        action="append",
        help="PostgreSQL: SQL run before the running leader's fill pass, instead of "
        f"{'; '.join(RUNNING_PREP)} (repeatable; '' for nothing)",
    )
    parser.add_argument(
        "--one-job-first",
        action="store_true",
        help="PostgreSQL: before the running leader's pass, its connection's plans are made "
        "again by a one-job update (rolled back)",
    )
    parser.add_argument(
        "--no-running",
        action="store_true",
        help="PostgreSQL: no second fill pass by a leader that has been running",
    )
    arguments = parser.parse_args()
    PAUSE_GC = not arguments.collect_in_pass
    NO_DRAIN = arguments.no_drain
    asyncio.run(main(arguments))
