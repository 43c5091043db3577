"""The node-protocol nemesis (``adapters/sim/nemesis.py``) over many seeds: faults drawn at random
at every step and message — daemons, the gateway and the coordinator killed, journal rows lost or
corrupted, a copied credential used from another machine, streams reset, messages lost or
duplicated, partitions, the gateway's clock skewed, a node's container engine not answering
(between a vote and its commit among others) — and after every step: no member recorded
ended while its container runs, no reservation released while a member of its attempt runs, no
member started twice, no live session taken over; at the end, with every fault healed, every job
ends and every reservation is released.

A failure prints the seed, the first violation and the fault log; ``NEMESIS_SEEDS=a-b`` runs other
seeds (e.g. a long local run: ``NEMESIS_SEEDS=0-5000``).
"""

from __future__ import annotations

import dataclasses
import os
import random
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.sim.nemesis import Nemesis
from adapters.sim.nemesis_model import NemesisRates
from adapters.sim.nodes import SimNodeBackend, SimNodeFleet
from application import submissions
from application.context import Context
from application.gang import GangCoordinator, GangSettings
from application.supervisor import Supervisor
from domain.fleet import Pool
from tests.support.context import ALICE, FakeClock, memory_context
from tests.unit.builders import an_intent

pytestmark = pytest.mark.sim

POOL = Pool("nodes", "main", "node", 0, 1.0, 1024)
NODES = [f"nodes-{i}" for i in range(4)]
STEPS = 40


def _seeds() -> range:
    first, _, last = os.environ.get("NEMESIS_SEEDS", "0-499").partition("-")
    return range(int(first), int(last or first) + 1)


def _coordinator(ctx: Context) -> Supervisor:
    gangs = GangCoordinator(ctx, GangSettings(prepare_timeout=timedelta(seconds=60)))
    return Supervisor(ctx, gangs=gangs, sweep_every=5)  # stale links swept often


async def run_seed(tmp_path: Path, seed: int, rates: NemesisRates | None = None) -> Nemesis:
    clock = FakeClock()
    ctx = memory_context(tmp_path, clock=clock, pools=(POOL,), nodes=len(NODES))
    ctx = dataclasses.replace(ctx, coordinated={"node": SimNodeBackend()})
    fleet = SimNodeFleet(ctx, NODES)
    shapes = random.Random(f"{seed}/shapes")

    async def submit() -> str:
        cpus = shapes.choice((1, 1, 2, 2, 3, 4))
        intent = an_intent(profiles=(f"nodes/cpu:{cpus}",), params={"command": "train"})
        preview = await submissions.create_preview(ctx, ALICE, intent)
        receipt = await submissions.commit(
            ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4())
        )
        return receipt.job_id

    nemesis = Nemesis(ctx, fleet, _coordinator, submit, ALICE, seed, rates or NemesisRates())
    for name in NODES:
        await nemesis._connect(nemesis.machines[name])
    for _ in range(STEPS):
        await nemesis.step()
        if nemesis.violations:
            return nemesis
    await nemesis.finish()
    return nemesis


async def test_the_nemesis_finds_no_violation_over_many_seeds(tmp_path: Path) -> None:
    for seed in _seeds():
        nemesis = await run_seed(tmp_path / str(seed), seed)
        assert not nemesis.violations, (
            f"seed {seed}: {nemesis.violations[0]}\nfaults:\n" + "\n".join(nemesis.log[-40:])
        )


async def test_the_same_seed_draws_the_same_faults_and_ends_the_same(tmp_path: Path) -> None:
    """A failing seed is reproduced by running it again (in-memory journals are called in place,
    not on a thread pool, so nothing but the seed decides the interleavings)."""
    runs = [await run_seed(tmp_path / str(i), 7) for i in range(2)]
    assert runs[0].log == runs[1].log and runs[0].step_no == runs[1].step_no
    assert runs[0].log  # faults were drawn
