"""The admission benchmark's figures and their report (``bench_admission.py``)."""

from __future__ import annotations

import statistics
import timeit
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Steady:
    """One pass over a busy fleet: some jobs ended and others arrived since the last."""

    ended: int
    arrived: int
    read_s: float
    decide_s: float
    apply_s: float
    placed: int


@dataclass
class Figures:
    cold_s: float  # a scheduler's first read and decide (after a start: every pending job read)
    read_s: float  # the steady pass's read: pools, nodes, queues and the jobs changed since
    decide_s: float
    apply_s: float
    placed_first: int
    drained: int
    drain_s: float
    passes: int
    view_mb: float  # resident memory the first read added (the kept view of pending jobs)
    rss_mb: float  # the process's peak resident memory at the end
    # the drain's passes that stored 500 placements or more: (seconds of store, placements)
    stores: list[tuple[float, int]] = field(default_factory=list)
    # for the same passes, seconds per statement of the store (PostgreSQL: time_statements)
    statements: list[dict[str, float]] = field(default_factory=list)
    # for the same passes, CPU seconds: this process's and PostgreSQL's (every backend's)
    cpu: list[tuple[float, float]] = field(default_factory=list)
    steady: Steady | None = None
    # the same fill pass again, by a leader that has been running (bench_admission.py: the
    # first pass's jobs pending again, its reservations released, RUNNING_PREP run)
    running: Steady | None = None


# the embedded server's postmaster.pid (set by ``postgres``): its children are the backends
def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (Linux /proc), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


# per timed pass, its name and the CPU seconds of its parts
RUNNING_PREP_TEXT = [""]  # what the running leader's fill pass had before it, in words
CPU_PARTS: list[tuple[str, dict[str, float]]] = []
# per timed pass, its name and its store on the server: CPU by process, WAL, statements
STORE_DETAIL: list[tuple[str, str]] = []


def report(name: str, f: Figures, jobs: int, nodes: int, arrivals: int) -> None:
    one = f.read_s + f.decide_s + f.apply_s
    for what, cpu in CPU_PARTS:
        print(f"{name}, {what}: CPU ms: read {cpu['read'] * 1e3:.0f} (PostgreSQL "
              f"{cpu['read_pg'] * 1e3:.0f}); decide alone {cpu['decide'] * 1e3:.0f}; decide and "
              f"store {cpu['decide_store'] * 1e3:.0f} (PostgreSQL {cpu['store_pg'] * 1e3:.0f}); "
              f"{cpu['placed']:.0f} placed; {cpu['collections']:.0f} garbage collections "
              f"in the pass, a full one after it {cpu['collected'] * 1e3:.0f}")  # fmt: skip
    for what, detail in STORE_DETAIL:
        if detail:
            print(f"{name}, {what}: {detail}")
    CPU_PARTS.clear()
    STORE_DETAIL.clear()
    print(
        f"\n== {name}: {jobs} pending jobs (+{arrivals} committed since the last read), "
        f"{nodes} nodes x 8 GPUs =="
    )
    print(
        f"fill pass, cold (a scheduler's first pass after its start, on tables just filled): "
        f"{one * 1000:.0f} ms = read {f.read_s * 1000:.0f} ms + decide "
        f"{f.decide_s * 1000:.0f} ms + store {f.apply_s * 1000:.0f} ms (with --overlap: the "
        f"pass less read and decide alone); {f.placed_first} jobs reserved"
    )
    print(
        f"without the store: {(f.read_s + f.decide_s) * 1000:.0f} ms; store per placement "
        f"{f.apply_s / max(f.placed_first, 1) * 1e6:.0f} us; ratio decide / whole pass: "
        f"{f.decide_s / one:.3f}"
    )
    if f.running:
        run = f.running
        print(
            f"the same fill pass by a leader that has been running ({RUNNING_PREP_TEXT[0]}): "
            f"{(run.read_s + run.decide_s + run.apply_s) * 1000:.0f} ms = read "
            f"{run.read_s * 1000:.0f} ms + decide {run.decide_s * 1000:.0f} ms + store "
            f"{run.apply_s * 1000:.0f} ms; {run.placed} jobs reserved; store per placement "
            f"{run.apply_s / max(run.placed, 1) * 1e6:.0f} us"
        )
    print(
        f"first read and decide after a start (every pending job read): "
        f"{f.cold_s * 1000:.0f} ms; the view it keeps: {f.view_mb:.1f} MiB resident "
        f"({f.view_mb * 1024 * 1024 / max(jobs, 1):.0f} bytes per pending job)"
    )
    if f.steady:
        st = f.steady
        whole = st.read_s + st.decide_s + st.apply_s
        print(
            f"steady pass (the fleet full; {st.ended} jobs ended and {st.arrived} arrived since "
            f"the last pass): {whole * 1000:.0f} ms = read and decide "
            f"{(st.read_s + st.decide_s) * 1000:.0f} ms + store {st.apply_s * 1000:.0f} ms; "
            f"{st.placed} jobs reserved (decide alone, timed again over the same snapshot: "
            f"{st.decide_s * 1000:.0f} ms)"
        )
    if f.stores:
        per = sorted(t / n for t, n in f.stores)
        print(f"drain's stores of 500 placements or more ({len(per)} passes, "
              f"{min(n for _, n in f.stores)}-{max(n for _, n in f.stores)} placements): per "
              f"placement median {statistics.median(per) * 1e6:.0f} us, best {per[0] * 1e6:.0f} "
              f"us; at the median, 1,277 placements take "
              f"{statistics.median(per) * 1277 * 1000:.0f} ms")  # fmt: skip
    if f.cpu:
        client = statistics.median(c / n for (c, _), (_, n) in zip(f.cpu, f.stores, strict=True))
        server = statistics.median(v / n for (_, v), (_, n) in zip(f.cpu, f.stores, strict=True))
        print(f"  CPU per placement (median; whatever the machine's load): this process "
              f"{client * 1e6:.0f} us, PostgreSQL {server * 1e6:.0f} us")  # fmt: skip
    names = sorted({k for d in f.statements for k in d})
    for name in names:
        each = [d.get(name, 0.0) / n for d, (_, n) in zip(f.statements, f.stores, strict=True)]
        print(f"  of which {name}: per placement median {statistics.median(each) * 1e6:.0f} us")
    print(f"drain: {f.drained} jobs admitted in {f.passes} passes, {f.drain_s:.2f} s of "
          f"scheduler time -> {f.drained / f.drain_s:,.0f} jobs admitted/s; peak resident "
          f"memory of the process {f.rss_mb:.0f} MiB")  # fmt: skip


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def python_speed() -> str:
    """This machine's speed for plain Python, to compare runs on different machines (the same
    code's figures moved 1.4-2.2 times between sessions' machines): the best of five runs of
    five ``sum(range(1_000_000))``, ms a run (34.9-35.8 on session 48's 2 GHz EPYC)."""
    best = min(timeit.repeat("sum(range(1_000_000))", repeat=5, number=5)) / 5
    return f"Python speed {1e3 * best:.1f} ms (sum(range(1_000_000)), best of 5 x 5)"
