"""A connection's first fill store, warmed or not: what the leader's warm-up (Scheduler.warm,
adapters/postgres/store_warm_up.py) moves out of its first pass.

The set-up of ``bench_admission`` (10,000 pending jobs, 1,000 empty nodes; the tables analyzed
or not: ``--analyze``), the fill pass decided once (1,277 placements). Then, each round, in turn:
a new connection stores the 1,277 placements (``start``, one transaction, rolled back) cold,
or after a warm-up on it; and a connection that stored before stores them again (the running
leader's case). Before each store the tables are vacuumed (not timed). Figures: the backend's
CPU (``/proc/PID/schedstat``) over the warm-up and over the store, medians over the rounds. Run:
``.venv/bin/python -m tests.bench.warm_store --rounds 7``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import text

from adapters.postgres import PostgresUnitOfWork
from adapters.postgres.engine import create_engine
from application.scheduler import Scheduler
from domain.admission import decide
from tests.bench.admission_postgres import PROBE, postgres
from tests.bench.bench_admission import make_ctx, populate, workload
from tests.bench.timeline_plan import cpu_ms


async def store(engine: Any, starts: list[Any], now: Any, warm: bool) -> tuple[float, float]:
    """On a connection of ``engine``: (the warm-up's backend CPU, the store's), ms. The tables
    are vacuumed first (the rows the stores before rolled back), by the probe's connection."""
    await PROBE[0].conn.execute("VACUUM")
    async with PostgresUnitOfWork(engine) as uow:
        conn = uow._conn
        assert conn is not None
        pid = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
        before = cpu_ms(pid)
        if warm:
            await uow.scheduling.warm(now)
        warmed = cpu_ms(pid)
        assert len(await uow.scheduling.start(starts, now)) == len(starts)
        return warmed - before, cpu_ms(pid) - warmed  # rolled back on leaving


async def run(args: argparse.Namespace, keep: Path) -> None:
    async with postgres(keep) as (factory, url):
        await populate(factory, 1_000, workload(args.jobs, 1))
        if args.analyze:
            engine = create_engine(url, pool_size=1)
            async with engine.connect() as conn:
                await conn.execute(text("COMMIT"))
                await conn.execute(text("ANALYZE"))
            await engine.dispose()
        sched = Scheduler(make_ctx(factory))
        snapshot, attempts = await sched.read()
        placements = decide(snapshot, explain_waits=False).placements
        now = sched.ctx.clock.now()
        starts = [sched._build(p, attempts.get(p.job_id, 0) + 1, now) for p in placements]
        kept = create_engine(url, pool_size=1)  # the running leader's connection
        await store(kept, starts, now, False)
        rows: dict[str, list[float]] = {}
        for r in range(args.rounds):
            kinds = [("cold", False), ("warmed", True)]
            for label, warm in kinds if r % 2 == 0 else kinds[::-1]:
                fresh = create_engine(url, pool_size=1)
                try:
                    warm_ms, store_ms = await store(fresh, starts, now, warm)
                finally:
                    await fresh.dispose()
                rows.setdefault(f"new connection, {label}: the store", []).append(store_ms)
                if warm:
                    rows.setdefault("new connection, warmed: the warm-up", []).append(warm_ms)
            rows.setdefault("a connection that stored before", []).append(
                (await store(kept, starts, now, False))[1]
            )
        await kept.dispose()
        print(f"{len(starts)} placements; backend CPU, ms: medians of {args.rounds} (all)")
        for label, values in rows.items():
            each = ", ".join(f"{v:.1f}" for v in values)
            print(f"  {label:<40} {statistics.median(values):6.1f} ({each})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--analyze", action="store_true", help="ANALYZE the tables first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
