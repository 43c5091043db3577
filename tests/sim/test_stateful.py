"""A Hypothesis state machine over the real use cases on the in-memory adapters: submit jobs
of random shapes, tick the coordinator (sometimes crashing it at a chosen point of the tick),
let members exit 0 or non-zero, cancel, disconnect and reconnect nodes, declare them lost, and
have launches refused. After every rule the reservation invariants must hold (see
``adapters.sim.invariants``), against the store and against what the backend really runs."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from adapters.sim import CrashPoint
from adapters.sim.faults import CRASH_KINDS
from domain.errors import InvalidInput, TunePlaneError, Unavailable
from domain.fleet import Pool, Queue
from domain.ports import LaunchRequest
from entrypoints.sim_scenario import PoolSpec
from entrypoints.sim_world import World

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.timeout(1200)]  # shrinking is slow

A = Pool("a", "sim", "node", 8, 96, 1_048_576, "h200")
CPU = Pool("cpu", "sim", "node", 0, 8, 32_768)
POOLS = [PoolSpec(A, 3), PoolSpec(CPU, 1)]
NODES = ["a-0", "a-1", "a-2", "cpu-0"]
QUEUES = [Queue("default", "research"), Queue("urgent", "ops", 5, gpu_quota=16, job_quota=2)]
SHAPES = [
    ("h200:1",),
    ("h200:4",),
    ("h200:8",),
    ("h200:16",),
    ("h200:24",),
    ("train=h200:8", "rollout=cpu:2"),
    ("cpu:2",),
]
T = TypeVar("T")


class Reservations(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.refusals: list[str] = []
        self.world = World(POOLS, QUEUES, refusal=self._refusal)
        self.run(self.world.setup())
        self.jobs: list[str] = []
        self.settled = True  # False between declaring a node lost and the next whole tick

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.world.supervisor.close())
        self.loop.close()

    def _refusal(self, request: LaunchRequest) -> TunePlaneError | None:
        if not self.refusals:
            return None
        if self.refusals.pop(0) == "refuse":
            return InvalidInput("refused by the test", fix="none")
        return Unavailable("busy", fix="retry later")

    @initialize(shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3))
    def some_jobs(self, shapes: list[tuple[str, ...]]) -> None:
        for shape in shapes:
            self.submit(shape, "default")

    @rule(shape=st.sampled_from(SHAPES), queue=st.sampled_from([q.name for q in QUEUES]))
    def submit(self, shape: tuple[str, ...], queue: str) -> None:
        try:
            self.jobs.append(self.run(self.world.submit(shape, queue)))
        except InvalidInput as exc:  # the urgent queue's quota is below h200:24
            assert "can never start" in exc.message

    @rule(crash=st.none() | st.builds(CrashPoint, st.sampled_from(CRASH_KINDS), st.integers(1, 3)))
    def tick(self, crash: CrashPoint | None) -> None:
        """A coordinator tick; with ``crash`` it dies at that point (if it gets there) and a
        fresh coordinator takes over at the next tick."""
        outcome = self.run(self.world.tick(crash))
        if outcome.crashed is None:
            self.settled = True

    @rule(pick=st.integers(0, 63), code=st.sampled_from([0, 0, 1, 137]))
    def member_exits(self, pick: int, code: int) -> None:
        backend = self.world.backends["node"]
        running = backend.running()
        if running:
            backend.finish(running[pick % len(running)][0], code)

    @rule(pick=st.integers(0, 63))
    def cancel(self, pick: int) -> None:
        unfinished = sorted(self.run(self.world.inspect(settled=False)).states)
        if unfinished:
            self.run(self.world.cancel(unfinished[pick % len(unfinished)]))

    @rule(node=st.sampled_from(NODES))
    def disconnect(self, node: str) -> None:
        self.run(self.world.disconnect(node))

    @rule(node=st.sampled_from(NODES))
    def reconnect(self, node: str) -> None:
        self.run(self.world.reconnect(node))

    @rule(node=st.sampled_from(NODES))
    def declare_lost(self, node: str) -> None:
        self.run(self.world.declare_lost(node))
        self.settled = False

    @rule(kind=st.sampled_from(["refuse", "unavailable"]))
    def refuse_next_launch(self, kind: str) -> None:
        self.refusals.append(kind)

    @invariant()
    def reservations_hold(self) -> None:
        violations = self.run(self.world.check(settled=self.settled))
        assert violations == [], "\n".join(str(v) for v in violations)


Reservations.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReservations = Reservations.TestCase
