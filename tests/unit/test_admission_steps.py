"""admission.decide_steps: the same decisions as decide, handed over in steps (the scheduler
stores each step's placements while the rest is decided)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from domain.admission import Decisions, Placement, Snapshot, decide, decide_steps, queue_order
from domain.fleet import Queue
from tests.unit.test_admission import POOLS, busy, job, nodes, queues

pytestmark = pytest.mark.unit

SHAPES = [("h200:1",), ("h200:2",), ("h200:4",), ("h200:8",), ("h200:16",), ("cpu:2",),
          ("train=h200:8", "eval=cpu:2")]  # fmt: skip


def snapshot(seed: int, jobs: int = 300) -> Snapshot:
    rng = random.Random(seed)
    views = [busy(v, rng.choice((0, 0, 1, 4, 8))) for v in nodes(POOLS["a"], 12)]
    views += nodes(POOLS["c"], 2, **{"c-1": "cordoned"})
    qs = queues(Queue("research", "vision", gpu_quota=40), Queue("prod", "vision", priority=2))
    pending = [
        job(n, *rng.choice(SHAPES), queue=rng.choice(("research", "prod"))) for n in range(jobs)
    ]
    # some jobs committed earlier: the queue order is not the list's
    pending = [p if n % 7 else replace(p, created_at=p.created_at - timedelta(days=1))
               for n, p in enumerate(pending)]  # fmt: skip
    return Snapshot(POOLS, views, qs, pending)


def run_steps(snap: Snapshot, every: int) -> tuple[list[list[Placement]], Decisions]:
    steps, gen = [], decide_steps(snap, explain_waits=False, every=every)
    while True:
        try:
            steps.append(next(gen))
        except StopIteration as stop:
            return steps, stop.value


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("every", [1, 7, 256])
def test_the_steps_hand_over_every_placement_once_in_order_and_decide_the_same(
    seed: int, every: int
) -> None:
    snap = snapshot(seed)
    steps, decisions = run_steps(snap, every)
    whole = decide(snap, explain_waits=False)
    assert decisions == whole
    assert [p for step in steps for p in step] == whole.placements
    assert whole.placements and whole.waits  # the snapshot exercises both
    # a step every ``every`` jobs walked (often empty), and one more for what is left
    assert len(steps) >= len(snap.pending) // every


def test_a_placement_handed_over_never_changes_afterwards() -> None:
    snap = snapshot(3)
    gen = decide_steps(snap, explain_waits=False, every=5)
    seen: list[tuple[Placement, Placement]] = []
    try:
        while True:
            seen += [(p, Placement(p.job_id, p.queue, tuple(p.assignments))) for p in next(gen)]
    except StopIteration:
        pass
    assert seen and all(p == copy for p, copy in seen)


def test_every_zero_never_yields() -> None:
    steps, decisions = run_steps(snapshot(1), 0)
    assert steps == [] and decisions == decide(snapshot(1), explain_waits=False)


@pytest.mark.parametrize("seed", range(4))
def test_a_snapshot_already_in_queue_order_is_decided_the_same_without_sorting(seed: int) -> None:
    snap = snapshot(seed)
    ordered = replace(snap, pending=queue_order(snap.pending, snap.queues), ordered=True)
    assert list(ordered.pending) != list(snap.pending)  # the scheduler sorts before it decides
    assert decide(ordered) == decide(snap)
