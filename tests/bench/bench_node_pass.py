"""The node gateway's passes over its sessions, without the network (not part of the suite).

One ``NodeControl`` over the in-memory adapters and ``BENCH_PASS_SESSIONS`` (10,000) sessions,
each holding one member the ledger does not know (``BENCH_PASS_BUSY``, 1 %) or nothing (the
rest, like the nodes of tests/bench/bench_node_gateway.py). Each round runs what the gateway's
loop runs every ``poll`` (0.5 s): the command pass, the credential, token and output-scan
passes. Measured per round: CPU time (``time.process_time``), and the longest stretch of CPU
time the event loop spent without running another task (a task that only yields records the
gaps, in process CPU time so that a busy machine's scheduling does not count), which is what a
heartbeat answer would wait on an idle machine. The code before session 40 has no
``commands_due``: the benchmark then runs the passes over every session as the gateway did (run
it with that code first on ``PYTHONPATH`` and ``--import-mode=append``).

Run: ``.venv/bin/pytest tests/bench/bench_node_pass.py -m bench -s``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import pytest

from application.enrollment import NodeIdentity
from application.node_control import NodeControl, Session
from domain.node_protocol import MemberRef, MemberReport, Phase
from tests.support.context import FakeClock, memory_context

pytestmark = pytest.mark.bench

SESSIONS = int(os.environ.get("BENCH_PASS_SESSIONS", "10000"))
BUSY = float(os.environ.get("BENCH_PASS_BUSY", "0.01"))
ROUNDS = int(os.environ.get("BENCH_PASS_ROUNDS", "40"))


async def one_round(control: NodeControl, live: dict[str, Session]) -> None:
    if hasattr(control, "commands_due"):  # this code: the incremental passes
        await control.commands_due(live)
        await control.rotations_due(live)
        await control.renewals_due(live)
        await control.scans_due(live)
    else:  # before: every pass over every session (adapters/grpc/node_gateway.py then)
        sessions = [s for s in live.values()]
        await control.commands(sessions)
        await control.rotations([s for s in live.values()])
        await control.renewals([s for s in live.values()])
        await control.scans([s for s in live.values()])


async def test_node_gateway_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    ctx = memory_context(tmp_path, clock=clock, nodes=0)
    control = NodeControl(ctx, "gw")
    live: dict[str, Session] = {}
    every = max(1, round(1 / BUSY)) if BUSY else 0
    for n in range(SESSIONS):
        name = f"node-{n:05d}"
        live[name] = session = Session(name, 1, 1, NodeIdentity(name, f"cred-{n}"))
        session.credential_at = clock.now()
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.process_time()
        while True:
            await asyncio.sleep(0)
            now = time.process_time()
            gaps.append(now - last)
            last = now

    cpu: list[float] = []
    worst: list[float] = []
    for r in range(ROUNDS):
        for n, session in enumerate(live.values()):  # the busy ones: a member to forget
            if every and n % every == 0:
                ref = MemberRef("att", f"m-{r}-{n}", 0, 1)
                session.held[ref.member_id] = (ref, Phase.RUNNING)
                await control.handle(
                    session, session.last_seq + 1, MemberReport(ref, Phase.RUNNING)
                )
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        gaps.clear()
        t0 = time.process_time()
        await one_round(control, live)
        cpu.append(time.process_time() - t0)
        await asyncio.sleep(0)  # the ticker records the gap since the pass last yielded
        tick.cancel()
        worst.append(max(gaps, default=0.0))
        clock.advance(seconds=0.5)
    incremental = hasattr(control, "commands_due")
    print(
        f"\n{'incremental' if incremental else 'every session'}: {SESSIONS} sessions, "
        f"{BUSY:.0%} busy, {ROUNDS} rounds: CPU per round median "
        f"{statistics.median(cpu) * 1000:.2f} ms (max {max(cpu) * 1000:.2f}); longest CPU "
        f"stretch without another task median {statistics.median(worst) * 1000:.2f} ms "
        f"(max {max(worst) * 1000:.2f})"
    )
