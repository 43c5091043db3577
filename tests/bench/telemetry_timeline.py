"""The telemetry bench's time-resolved view: which moments hold the slow acks, and what ran then.

A thread samples every ``SLOT`` seconds over the run: the CPU (user + system, /proc) of the
gateways, of PostgreSQL (the postmaster and its children) and of the load generators, and what
PostgreSQL was doing (``pg_stat_activity``: a rollup fold, another long statement, autovacuum,
and the checkpoints counted so far). Afterwards the acks are put in the slot their batch was
sent in: per slot the batches, ack p50 / p99 / max, the CPU each part took (share of one core)
and the marks. ``slow`` lists the slots whose acks took over ``SLOW_MS``; ``render`` prints
them with the slot before and after, and the run's folds with their durations.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import asyncpg
import numpy as np

from tests.support.db import plain_dsn

SLOT = 0.25  # seconds
SLOW_MS = 100.0
FOLDS = ("WITH d AS (DELETE", "WITH s AS MATERIALIZED")  # metric_rollups.py's statements

_ACTIVITY = """
SELECT backend_type, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) AS q,
    extract(epoch FROM query_start) AS started
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND state = 'active'
    AND (backend_type <> 'client backend' OR query LIKE 'WITH d AS (DELETE%'
         OR query LIKE 'WITH s AS MATERIALIZED%' OR now() - query_start > interval '50 ms')
"""
_PENDING = (  # cumulative, flushed by each backend about once a second: a trend, not a count
    "SELECT n_tup_ins - n_tup_del FROM pg_stat_user_tables WHERE relname = 'metric_rollup_deltas'"
)
_CHECKPOINTS = (
    "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
    "SELECT num_timed + num_requested FROM pg_stat_checkpointer",  # PostgreSQL 17
)


@dataclass
class Sample:
    at: float  # wall clock
    cpu: dict[str, float]  # cumulative CPU seconds per part
    active: list[tuple[str, str, float]]  # (backend type, query, started at)
    checkpoints: int
    pending: int  # rollup deltas inserted less deleted (folded) so far, by the statistics


@dataclass
class Timeline:
    url: str
    parts: Callable[[], dict[str, list[int]]]  # part -> its pids now
    cpu_of: Callable[[int], float]
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    async def _run(self) -> None:
        conn = await asyncpg.connect(plain_dsn(self.url))
        try:
            checkpoints_sql = _CHECKPOINTS[0]
            try:
                await conn.fetchval(checkpoints_sql)
            except asyncpg.PostgresError:
                checkpoints_sql = _CHECKPOINTS[1]
            seen: dict[int, float] = {}  # a pid's last CPU reading (a backend may exit)
            gone: dict[str, float] = {}
            next_at = time.time()
            while not self.stop.is_set():
                cpu: dict[str, float] = {}
                for part, pids in self.parts().items():
                    total = gone.get(part, 0.0)
                    for pid in pids:
                        seen[pid] = c = self.cpu_of(pid) or seen.get(pid, 0.0)
                        total += c
                    cpu[part] = total
                rows = await conn.fetch(_ACTIVITY)
                checkpoints = int(await conn.fetchval(checkpoints_sql))
                pending = int(await conn.fetchval(_PENDING) or 0)
                active = [(r["backend_type"], r["q"] or "", float(r["started"] or 0)) for r in rows]
                self.samples.append(Sample(time.time(), cpu, active, checkpoints, pending))
                next_at += SLOT
                await asyncio.sleep(max(0.0, next_at - time.time()))
        finally:
            await conn.close()

    def slots(self, latencies: np.ndarray, t0: float, t1: float) -> list[dict[str, object]]:
        """Per slot from ``t0`` to ``t1``: acks of the batches sent in it and what ran."""
        out: list[dict[str, object]] = []
        sent, lat = latencies[:, 0], latencies[:, 1] * 1000
        for a in np.arange(t0, t1, SLOT):
            b = a + SLOT
            here = lat[(sent >= a) & (sent < b)]
            inside = [s for s in self.samples if a <= s.at < b + SLOT]
            cores: dict[str, float] = {}
            if len(inside) >= 2:
                dt = inside[-1].at - inside[0].at
                cores = {k: (inside[-1].cpu[k] - inside[0].cpu[k]) / dt for k in inside[0].cpu}
            marks = sorted({_mark(x) for s in inside for x in s.active})
            if len(inside) >= 2 and inside[-1].checkpoints > inside[0].checkpoints:
                marks.append("checkpoint done")
            out.append({
                "t": round(a - t0, 2),
                "n": len(here),
                "p50": float(np.percentile(here, 50)) if len(here) else 0.0,
                "p99": float(np.percentile(here, 99)) if len(here) else 0.0,
                "max": float(here.max()) if len(here) else 0.0,
                "cores": cores,
                "pending": inside[-1].pending if inside else 0,
                "marks": marks,
            })  # fmt: skip
        return out

    def folds(self, t0: float) -> list[tuple[float, float]]:
        """The folds seen: (start from ``t0``, seconds at least: the last sample that saw it)."""
        runs: dict[float, float] = {}
        for s in self.samples:
            for kind, q, started in s.active:
                if kind == "client backend" and q.startswith(FOLDS):
                    runs[started] = max(runs.get(started, 0.0), s.at - started)
        return [(round(k - t0, 2), round(v, 3)) for k, v in sorted(runs.items())]


def _mark(active: tuple[str, str, float]) -> str:
    kind, q, _ = active
    if kind == "client backend":
        return "fold" if q.startswith(FOLDS) else f"long: {q[:40]}"
    return kind if kind != "autovacuum worker" else f"autovacuum: {q[:40]}"


def render(slots: list[dict[str, object]], folds: list[tuple[float, float]]) -> str:
    """The slow slots with their neighbours, the folds, and the share of slow acks per mark."""
    slow = {i for i, s in enumerate(slots) if float(s["max"]) > SLOW_MS}  # type: ignore[arg-type]
    shown = sorted({j for i in slow for j in (i - 1, i, i + 1) if 0 <= j < len(slots)})
    lines = [
        f"  time-resolved acks ({SLOT * 1000:.0f} ms slots by send time, t from the window's"
        f" start; {len(slow)} of {len(slots)} slots have an ack over {SLOW_MS:.0f} ms):",
        "      t    n   p50   p99   max   gw   pg load  deltas  marks",
    ]
    for i in shown:
        s = slots[i]
        c: dict[str, float] = s["cores"]  # type: ignore[assignment]
        lines.append(
            f"  {'*' if i in slow else ' '}{s['t']:6.2f} {s['n']:4} {s['p50']:5.0f} {s['p99']:5.0f}"
            f" {s['max']:5.0f} {c.get('gateways', 0):4.2f} {c.get('postgres', 0):4.2f}"
            f" {c.get('load', 0):4.2f} {s['pending']:7}  {', '.join(s['marks']) or '-'}"  # type: ignore[arg-type]
        )
    lines.append(f"  folds (start s, lasted at least s): {folds or 'none seen'}")
    pend = [int(s["pending"]) for s in slots]  # type: ignore[call-overload]
    lines.append(f"  rollup deltas pending (statistics) over the window: {min(pend):,} to"
                 f" {max(pend):,}, at the end {pend[-1]:,}")  # fmt: skip
    with_fold = [i for i in slow if "fold" in slots[i]["marks"]]  # type: ignore[operator]
    lines.append(f"  slow slots during a fold: {len(with_fold)} of {len(slow)}")
    return "\n".join(lines)


def by_second(latencies: np.ndarray, t0: float, t1: float) -> str:
    """Ack p50 / p99 (ms) of the batches sent in each second from ``t0`` to ``t1``: whether a
    run that fell behind drains again (p50s that grow, then fall back), stays behind or falls
    further."""
    sent, lat = latencies[:, 0], latencies[:, 1] * 1000
    cells = []
    for a in np.arange(t0, t1, 1.0):
        here = lat[(sent >= a) & (sent < a + 1.0)]
        if len(here):
            cells.append(f"{np.percentile(here, 50):.0f}/{np.percentile(here, 99):.0f}")
        else:
            cells.append("-")
    return "  ack p50/p99 (ms) by the second a batch was sent, from the first: " + " ".join(cells)
