"""Simulator benchmark (not part of the test suite): the large scenario, deploy/sim/large.toml
(1,000 nodes × 8 GPUs, 10,000 jobs pending at once), through the whole control loop.

What one simulated step costs on the in-memory adapters — committing the arrivals (preview +
commit each), the coordinator's tick (scheduling pass, reservations, launches, observations),
and the invariant checks — and placements per second of wall time and of simulated time; the
first tick (the pass that fills the fleet and launches what it placed) apart from the others
(a pass over the jobs left pending, and following the running ones), and what 100 seeds of the
run would take. It says the load average before and after, and how much of a core it used.
Baseline, measured in the same run: ``admission.decide`` alone over the snapshot the first
pass saw, so the tick's figure reads as a ratio against the pure function it wraps.

Run: ``.venv/bin/python -m tests.bench.bench_sim [--steps 10] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from domain.admission import Snapshot, decide
from entrypoints.sim import Simulation
from entrypoints.sim_scenario import load_scenario
from tests.bench.proc_stats import loadavg

ROOT = Path(__file__).resolve().parents[2]


def ms(xs: list[float]) -> str:
    return f"{statistics.mean(xs) * 1000:.0f} ms" if xs else "-"


async def main(args: argparse.Namespace) -> None:
    logging.getLogger("tuneplane").setLevel(logging.ERROR)
    load_before = loadavg()
    cpu_started, wall_started = time.process_time(), time.perf_counter()
    scenario = load_scenario(args.scenario)
    sim = Simulation(scenario, args.seed, steps=args.steps, explain=0)
    first: list[float] = []
    snapshot_holder: list[Snapshot] = []
    world = sim.world
    original = world.supervisor.scheduler.decide
    original_pass = world.supervisor.scheduler.pass_once
    original_tick, original_inspect = world.tick, world.inspect
    ticks_each: list[float] = []
    passes_each: list[float] = []
    checks_each: list[float] = []
    tick_cpu: list[float] = []  # this process's CPU time in each tick (whatever share it had)
    check_cpu: list[float] = []

    async def decide_and_keep() -> Any:
        if not snapshot_holder:  # the first pass's snapshot, for the baseline
            async with world.api.uow() as uow:
                snapshot_holder.append(await uow.scheduling.snapshot(scenario.snapshot_limit))
        started = time.perf_counter()
        out = await original()
        first.append(time.perf_counter() - started)
        return out

    async def timed_pass() -> Any:
        started = time.perf_counter()
        try:
            return await original_pass()
        finally:
            passes_each.append(time.perf_counter() - started)

    async def timed_tick(crash: Any = None) -> Any:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return await original_tick(crash)
        finally:
            ticks_each.append(time.perf_counter() - started)
            tick_cpu.append(time.process_time() - cpu)

    async def timed_inspect(settled: bool = True) -> Any:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return await original_inspect(settled)
        finally:
            checks_each.append(time.perf_counter() - started)
            check_cpu.append(time.process_time() - cpu)

    world.supervisor.scheduler.decide = decide_and_keep  # type: ignore[method-assign]
    world.supervisor.scheduler.pass_once = timed_pass  # type: ignore[method-assign]
    world.tick = timed_tick  # type: ignore[method-assign]
    world.inspect = timed_inspect  # type: ignore[method-assign]
    summary = await sim.run()
    cpu, wall = time.process_time() - cpu_started, time.perf_counter() - wall_started
    split = summary.wall_split
    steps = summary.steps
    print(
        f"== {scenario.name}: {len(scenario.nodes)} nodes, "
        f"{sum(p.pool.gpus_per_node * p.nodes for p in scenario.pools)} GPUs, "
        f"{scenario.workload.jobs} jobs, {steps} steps, seed {args.seed} =="
    )
    arrivals = split.get("arrivals", 0.0)
    print(
        f"arrivals: {summary.jobs.get('total', 0)} previews + commits in {arrivals:.2f} s "
        f"({summary.jobs.get('total', 0) / arrivals:,.0f}/s)"
        if arrivals
        else "arrivals: none"
    )
    ticks, checks = split.get("ticks", 0.0), split.get("checks", 0.0)
    print(
        f"coordinator ticks: {ticks:.2f} s for {steps} ticks ({ticks / steps * 1000:.0f} ms "
        f"each); invariant checks: {checks:.2f} s ({checks / steps * 1000:.0f} ms each)"
    )
    following = [t - p for t, p in zip(ticks_each, passes_each, strict=False)]
    print(
        f"  tick 1 (the pass that fills the fleet, launches): {ms(ticks_each[:1])} "
        f"(scheduling pass {ms(passes_each[:1])}); ticks 2-{steps}: {ms(ticks_each[1:])} "
        f"each (scheduling pass {ms(passes_each[1:])}, launch/observe/record {ms(following[1:])})"
    )
    print(
        f"  invariant checks: step 1 {ms(checks_each[:1])}, "
        f"steps 2-{steps} {ms(checks_each[1:])} each"
    )
    print(
        f"  CPU time of this process (not wall): tick mean {ms(tick_cpu)} (tick 1 "
        f"{ms(tick_cpu[:1])}, ticks 2-{steps} {ms(tick_cpu[1:])}); check mean {ms(check_cpu)}"
    )
    print(
        f"placements: {summary.placements} in {summary.passes} passes; "
        f"{summary.placements / ticks:,.0f} per wall second of ticking, "
        f"{summary.placements_per_wall_second:,.0f} per wall second overall, "
        f"{summary.placements_per_sim_second:.2f} per simulated second"
    )
    print(f"GPU utilisation (reserved): {summary.gpu_utilisation:.1%}")
    if snapshot_holder:
        started = time.perf_counter()
        decide(snapshot_holder[0], explain_waits=False)
        alone = time.perf_counter() - started
        print(
            f"baseline: decide alone over the first pass's snapshot: {alone * 1000:.0f} ms; "
            f"the scheduler's decide step in the first tick: {first[0] * 1000:.0f} ms; "
            f"ratio mean tick / decide alone: {ticks / steps / alone:.1f}; "
            f"mean invariant check / decide alone: {checks / steps / alone:.1f}"
        )
    per_seed = sum(split.values())
    print(
        f"one seed of {steps} steps: {per_seed:.1f} s of simulation ({wall:.1f} s with set-up); "
        f"100 seeds, one process after another: {100 * wall / 60:.1f} min "
        f"({100 * wall / 60 / 2:.1f} min over 2 cores)"
    )
    print(
        f"machine: {os.cpu_count()} cores; this process used {cpu:.1f} s of CPU in {wall:.1f} s "
        f"({cpu / wall:.0%} of one core); load average before {load_before}, after {loadavg()}"
    )
    print(f"trace sha256: {summary.trace_hash}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scenario", type=Path, default=ROOT / "deploy/sim/large.toml")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    asyncio.run(main(p.parse_args()))
