"""What a fill pass's wall time is made of: one pass as a timeline.

The set-up of ``bench_admission`` (10,000 pending jobs, 1,000 empty nodes, a private
PostgreSQL), then ``--rounds`` fill passes by a running leader (the first pass's reservations
released, its jobs pending again, ``VACUUM ANALYZE; CHECKPOINT``, an untimed read: as
``bench_admission``'s "running leader"). Each pass is traced, not timed by parts:

  * the read (its statements), then each step of ``decide`` that handed placements over;
  * each store batch (``Scheduler._start``: one transaction), and in it each statement's send
    and return with its backend's CPU over the statement (``/proc/PID/schedstat`` of the
    connection's server process), and the commit;
  * this process's CPU over the whole pass.

Then a summary: what ran alone (read; decide until the first batch left; the store after
decide ended) and what overlapped. Run:
``.venv/bin/python -m tests.bench.fill_timeline --store-groups 1 --rounds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any, cast

import application.overlap as overlap_module
from application.scheduler import Scheduler, collector_paused
from domain.admission import decide_steps
from tests.bench.admission_postgres import RUNNING_PREP, pending_again, postgres
from tests.bench.admission_report import load
from tests.bench.bench_admission import add_jobs, finish_reserved, make_ctx, populate, workload

EVENTS: list[tuple[float, str, str]] = []  # (seconds since the pass began, who, what)
T0 = [0.0]
_HEADS = {"WITH moved AS": "jobs stmt", "WITH d AS": "reserve stmt"}


def note(who: str, what: str) -> None:
    EVENTS.append((time.perf_counter() - T0[0], who, what))


def backend_cpu(pid: int) -> float:
    """Seconds on CPU so far of the server process ``pid``."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def trace_statements(engine: Any) -> None:
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        pid = conn.connection.driver_connection.get_server_pid()
        head = next((v for k, v in _HEADS.items() if statement.startswith(k)), statement[:28])
        conn.info["tp_trace"] = (pid, backend_cpu(pid), time.perf_counter(), head)
        note(f"pg {pid}", f"send {head!r}")

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        pid, cpu, t, head = conn.info.pop("tp_trace")
        spent = backend_cpu(pid) - cpu
        wall = time.perf_counter() - t
        what = f"back {head!r}: wall {wall * 1e3:.1f} ms, backend CPU {spent * 1e3:.1f} ms"
        note(f"pg {pid}", what)

    @event.listens_for(engine, "commit")
    def _commit(conn: Any) -> None:
        note("pg", "commit sent")


def trace_scheduler(sched: Scheduler) -> None:
    read, start = sched.read, sched._start

    async def traced_read() -> Any:
        note("read", "begins")
        out = await read()
        note("read", f"ends ({len(out[0].pending)} pending)")
        return out

    async def traced_start(chunk: Sequence[Any], attempts: Any) -> list[str]:
        note("store", f"batch of {len(chunk)} begins")
        out = await start(chunk, attempts)
        note("store", f"batch of {len(chunk)} committed")
        return out

    sched.read = traced_read  # type: ignore[method-assign]
    sched._start = traced_start  # type: ignore[method-assign]


_decide_steps = decide_steps


def traced_steps(*args: Any, **kwargs: Any) -> Generator[Any, None, Any]:
    note("decide", "begins")
    steps = _decide_steps(*args, **kwargs)
    total = 0
    while True:
        try:
            made = next(steps)
        except StopIteration as stop:
            note("decide", f"ends ({total} placements)")
            return stop.value
        if made:
            total += len(made)
            note("decide", f"hands over {len(made)} (total {total})")
        yield made


def summary(events: list[tuple[float, str, str]], cpu: float) -> str:
    at = {what: t for t, who, what in events if who in ("read", "decide")}
    read_end = next(t for t, who, what in events if who == "read" and what.startswith("ends"))
    decide_end = next(t for t, who, what in events if who == "decide" and what.startswith("ends"))
    first_send = next(t for t, who, what in events if who.startswith("pg ") and
                      what.startswith("send 'jobs"))  # fmt: skip
    end = events[-1][0]
    backend = sum(float(w.split("backend CPU ")[1].split(" ms")[0]) for _, who, w in events
                  if who.startswith("pg ") and w.startswith("back")
                  and ("'jobs stmt'" in w or "'reserve stmt'" in w))  # fmt: skip
    statements = sum(float(w.split("wall ")[1].split(" ms")[0]) for _, who, w in events
                     if who.startswith("pg ") and w.startswith("back")
                     and ("'jobs stmt'" in w or "'reserve stmt'" in w))  # fmt: skip
    commits = [t for t, who, w in events if w == "commit sent"]
    done = [t for t, who, w in events if who == "store" and w.endswith("committed")]
    commit = sum(b - a for a, b in zip(commits, done, strict=False))
    gaps = (end - first_send) - statements / 1e3 - commit  # one group: nothing on the server
    return (f"store statements' wall {statements:.0f} ms; commits {commit * 1e3:.0f} ms; "
            f"store leg's client gaps (one group) {gaps * 1e3:.0f} ms\n  "
            f"read {read_end * 1e3:.0f} ms; decide to the first batch "
            f"{(first_send - read_end) * 1e3:.0f} ms; decide ends at {decide_end * 1e3:.0f} ms "
            f"(began {at.get('begins', 0) * 1e3:.0f}); store after decide ended "
            f"{(end - decide_end) * 1e3:.0f} ms; pass {end * 1e3:.0f} ms; this process's CPU "
            f"{cpu * 1e3:.0f} ms; the store statements' backend CPU {backend:.0f} ms")  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    every = workload(args.jobs + 100, 1)
    jobs, arrivals = every[: args.jobs], every[args.jobs :]
    vars(overlap_module)["decide_steps"] = traced_steps  # the pass's decide, traced
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as tmp:
        async with postgres(Path(tmp)) as (factory, _url):
            await populate(factory, args.nodes, jobs)
            ctx = make_ctx(factory)
            sched = Scheduler(ctx, store_groups=args.store_groups)
            await sched.decide()
            await add_jobs(factory, arrivals)
            trace_statements(cast(Any, factory())._engine.sync_engine)
            trace_scheduler(sched)
            for n in range(args.rounds + 1):
                EVENTS.clear()
                T0[0] = time.perf_counter()
                c = time.process_time()
                with collector_paused():
                    result = await sched.pass_once()
                cpu = time.process_time() - c
                label = "cold" if n == 0 else f"running leader, round {n}"
                print(f"\n== fill pass, {label}: {len(result.reserved)} placed, "
                      f"load {load()}")  # fmt: skip
                for t, who, what in EVENTS:
                    print(f"  {t * 1e3:7.1f} ms  {who:10s} {what}")
                print("  " + summary(list(EVENTS), cpu))
                await finish_reserved(factory)
                await pending_again(list(result.reserved), RUNNING_PREP)
                await sched.read()
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--store-groups", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
