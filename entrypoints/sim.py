"""The deterministic simulator (`tp sim --scenario FILE --seed N`; docs/simulator.md).

It runs the real admission, reservation and launch code — ``application.submissions``
(preview + commit), ``application.supervisor.Supervisor`` (the scheduling pass, launch, observe,
record, release), ``application.jobs.cancel_job``, ``application.reconcile.declare_node_lost``
— over the in-memory adapters, with a fake clock, counting ids, a simulated backend whose
members run for a seeded time on their reserved nodes, and seeded faults. No scheduling logic
lives here: this module only composes, injects faults, checks invariants and keeps the trace.

Each step: advance the clock; members whose time is up exit; this step's arrivals are
committed; this step's faults apply; the coordinator ticks (a crash abandons it mid-tick and a
fresh one, on the same store and backend, ticks in its place); the invariants are checked; a
canonical line is added to the trace. The trace hash is sha256 over those lines: the same
scenario and seed always give the same hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.catalog import default_catalog
from adapters.memory import MemoryLeaderLease, MemoryStore, MemoryUnitOfWork
from adapters.sim import (
    Crash,
    CrashingBackend,
    CrashPlan,
    CrashPoint,
    Inspection,
    MemoryBlobStore,
    SimBackend,
    SimClock,
    Violation,
    inspect,
)
from adapters.sim.clock import CountingIds
from adapters.sim.faults import CRASH_KINDS, crashing
from application import jobs as job_cases
from application import reconcile, submissions
from application.context import Context, Limits
from application.explain import explain_job
from application.scheduler import PassResult, Scheduler
from application.supervisor import Supervisor
from domain.admission import Reservation
from domain.auth import Principal, Role, User
from domain.catalog import RuntimeSpec
from domain.errors import InvalidInput, TunePlaneError, Unavailable
from domain.fleet import Connectivity, Node, Queue, Team
from domain.lifecycle import JOB_FINAL, JobState
from domain.ports import ExecutionBackend, LaunchRequest
from domain.requests import Profile
from domain.submission import SubmissionIntent
from entrypoints.sim_scenario import (
    FAULT_KINDS,
    PoolSpec,
    Scenario,
    ScheduledFault,
)

SIM_RUNTIME = RuntimeSpec(
    name="sim",
    image="sim/runtime:1",
    python=None,
    process_model="single-process",
    description="the simulator's stand-in runtime (nothing is executed)",
)
OPERATOR = Principal("sim-operator", Role.OPERATOR)


# -- the world: store, clock, backends, the API side and the coordinator -------------------------


class RecordingScheduler(Scheduler):
    """The real scheduler; it only remembers the results of its passes for the trace."""

    def __init__(self, ctx: Context, results: list[PassResult], **kw: Any) -> None:
        super().__init__(ctx, **kw)
        self.results = results

    async def pass_once(self) -> PassResult:
        result = await super().pass_once()
        self.results.append(result)
        return result


@dataclass(frozen=True, slots=True)
class TickOutcome:
    crashed: CrashPoint | None
    passes: list[PassResult]


class World:
    """A control plane on in-memory adapters: the API side (previews, commits, cancels,
    operator decisions) and the coordinator (the supervisor under the leader lease), sharing
    one store, a fake clock and the simulated backends. Also driven by the property tests."""

    def __init__(
        self,
        pools: Sequence[PoolSpec],
        queues: Sequence[Queue],
        profiles: Sequence[Profile] = (),
        *,
        fate: Callable[[LaunchRequest], tuple[float, int] | None] | None = None,
        refusal: Callable[[LaunchRequest], TunePlaneError | None] | None = None,
        snapshot_limit: int = 20_000,
        batch: int = 100,
    ) -> None:
        self.pool_specs = tuple(pools)
        self.queues = tuple(queues)
        self.profiles = tuple(profiles)
        self.store = MemoryStore()
        self.clock = SimClock()
        self.ids = CountingIds()
        self.plan = CrashPlan()
        self.snapshot_limit = snapshot_limit
        self.batch = batch
        names = sorted({p.pool.backend for p in pools})
        self.backends = {n: SimBackend(n, self.clock, fate=fate, refusal=refusal) for n in names}
        catalog = default_catalog((SIM_RUNTIME,))
        blobs = MemoryBlobStore()
        limits = Limits(stop_grace_seconds=0.0, max_log_bytes=4096)
        store = self.store
        self.api = Context(
            uow=lambda: MemoryUnitOfWork(store),
            clock=self.clock,
            ids=self.ids,
            catalog=catalog,
            backends=dict(self.backends),
            blobs=blobs,
            new_secret=lambda: "sim-secret",
            limits=limits,
        )
        wrapped: dict[str, ExecutionBackend] = {
            n: CrashingBackend(b, self.plan) for n, b in self.backends.items()
        }
        self.coordinator = Context(
            uow=crashing(lambda: MemoryUnitOfWork(store), self.plan),
            clock=self.clock,
            ids=self.ids,
            catalog=catalog,
            backends=wrapped,
            blobs=blobs,
            new_secret=lambda: "sim-secret",
            limits=limits,
        )
        self.results: list[PassResult] = []
        self.restarts = 0
        self.retry_keys = 0
        self.owners: dict[str, Principal] = {}
        self.supervisor, self.lease = self._start()

    def _start(self) -> tuple[Supervisor, MemoryLeaderLease]:
        lease = MemoryLeaderLease(self.store.leases)
        scheduler = RecordingScheduler(
            self.coordinator, self.results, snapshot_limit=self.snapshot_limit, batch=self.batch
        )
        return Supervisor(self.coordinator, lease, scheduler=scheduler), lease

    @staticmethod
    def user_of(team: str) -> Principal:
        return Principal(f"{team}-user", Role.MEMBER, (team,))

    async def setup(self) -> None:
        """Write the fleet, the teams, their users and the queues through the repositories."""
        async with self.api.uow() as uow:
            for spec in self.pool_specs:
                await uow.fleet.put_pool(spec.pool)
                for name in spec.node_names():
                    await uow.fleet.put_node(Node(name, spec.pool.name))
            for profile in self.profiles:
                await uow.fleet.put_profile(profile)
            teams = sorted({q.team for q in self.queues})
            for team in teams:
                await uow.policy.put_team(Team(team))
                p = self.user_of(team)
                await uow.policy.put_user(User(p.name, p.role, p.teams, self.clock.now()))
            await uow.policy.put_user(User(OPERATOR.name, OPERATOR.role, (), self.clock.now()))
            for q in self.queues:
                await uow.policy.put_queue(q)
            await uow.commit()

    @property
    def sim_backends(self) -> list[SimBackend]:
        return [self.backends[n] for n in sorted(self.backends)]

    # -- the API side ---------------------------------------------------------------------

    async def submit(self, profiles: Sequence[str], queue: str) -> str:
        """Preview and commit a job through the real use cases; returns its id."""
        team = next(q.team for q in self.queues if q.name == queue)
        who = self.user_of(team)
        intent = SubmissionIntent(
            experiment="sim",
            method="custom/custom",
            profiles=tuple(profiles),
            params={"command": "train"},
            runtime=SIM_RUNTIME.name,
            queue=queue,
        )
        preview = await submissions.create_preview(self.api, who, intent)
        self.retry_keys += 1
        key = f"sim-retry-key-{self.retry_keys:08d}"
        receipt = await submissions.commit(self.api, who, preview.id, preview.digest, key)
        self.owners[receipt.job_id] = who
        return receipt.job_id

    async def cancel(self, job_id: str) -> str:
        details = await job_cases.cancel_job(self.api, self.owners[job_id], job_id)
        return details.job.state

    async def disconnect(self, node: str) -> bool:
        """The node's control stream drops: its members become unknown. False if it was not
        connected."""
        async with self.api.uow() as uow:
            current = await uow.fleet.node(node)
            if current is None or current.connectivity is not Connectivity.CONNECTED:
                return False
            await uow.fleet.set_node_state(node, connectivity=Connectivity.DISCONNECTED)
            await uow.commit()
        for b in self.backends.values():
            b.disconnect(node)
        return True

    async def reconnect(self, node: str) -> bool:
        """Contact is back (never for a node declared lost). False if nothing changed."""
        async with self.api.uow() as uow:
            current = await uow.fleet.node(node)
            if current is None or current.connectivity is not Connectivity.DISCONNECTED:
                return False
            await uow.fleet.set_node_state(node, connectivity=Connectivity.CONNECTED)
            await uow.commit()
        for b in self.backends.values():
            b.reconnect(node)
        return True

    async def declare_lost(self, node: str) -> int:
        """An operator declares the node lost (it stays out of contact for good)."""
        for b in self.backends.values():
            b.disconnect(node)
        return await reconcile.declare_node_lost(
            self.api, OPERATOR, node, "declared lost by the simulator"
        )

    # -- the coordinator ------------------------------------------------------------------

    async def restart(self) -> None:
        """The coordinator died: its stop requests in flight die with it, its lease is
        dropped; a fresh one starts on the same store and backends."""
        await self.supervisor.close()
        self.lease.crash()
        self.plan.disarm()
        self.supervisor, self.lease = self._start()
        self.restarts += 1

    async def tick(self, crash: CrashPoint | None = None) -> TickOutcome:
        """One coordinator tick; with ``crash``, the coordinator dies at that point (if the
        tick gets there) and a fresh one is started, which ticks next time."""
        first = len(self.results)
        self.plan.arm(crash)
        fired: CrashPoint | None = None
        try:
            await self.supervisor.tick()
        except Crash:
            fired = self.plan.fired
            await self.restart()
        finally:
            self.plan.disarm()
        for _ in range(3):  # let the stop requests of this tick reach the backend
            await asyncio.sleep(0)
        return TickOutcome(fired, self.results[first:])

    async def check(self, settled: bool = True) -> list[Violation]:
        """Every invariant violated now (empty when all hold)."""
        return (await self.inspect(settled)).violations

    async def inspect(self, settled: bool = True) -> Inspection:
        return await inspect(self.api.uow, self.sim_backends, settled=settled)


# -- the run --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobPlan:
    arrival: int  # 1-based arrival number
    step: int
    shape: int
    queue: str
    duration: float
    failing: int | None  # the member index that exits non-zero, if any
    fail_at: float  # its share of the duration


@dataclass(frozen=True, slots=True)
class Waiting:
    job_id: str
    state: str
    kind: str
    text: str


@dataclass(slots=True)
class Summary:
    scenario: str
    seed: int
    steps: int
    simulated_seconds: float
    wall_seconds: float
    trace_hash: str
    jobs: dict[str, int]  # final counts by state (and "waiting"/"active")
    gpu_utilisation: float  # reserved GPU-seconds / available GPU-seconds
    passes: int
    placements: int
    crashes: int
    faults: dict[str, int]
    invariant_checks: int
    waiting: list[Waiting] = field(default_factory=list)
    wall_split: dict[str, float] = field(default_factory=dict)  # wall seconds by phase

    @property
    def placements_per_sim_second(self) -> float:
        return self.placements / self.simulated_seconds if self.simulated_seconds else 0.0

    @property
    def placements_per_wall_second(self) -> float:
        return self.placements / self.wall_seconds if self.wall_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "steps": self.steps,
            "simulated_seconds": self.simulated_seconds,
            "wall_seconds": round(self.wall_seconds, 3),
            "trace_hash": self.trace_hash,
            "jobs": dict(self.jobs),
            "gpu_utilisation": round(self.gpu_utilisation, 4),
            "passes": self.passes,
            "placements": self.placements,
            "placements_per_simulated_second": round(self.placements_per_sim_second, 4),
            "placements_per_wall_second": round(self.placements_per_wall_second, 1),
            "crashes": self.crashes,
            "faults": dict(self.faults),
            "invariant_checks": self.invariant_checks,
            "wall_split": {k: round(v, 3) for k, v in sorted(self.wall_split.items())},
            "waiting": [
                {"job": w.job_id, "state": w.state, "kind": w.kind, "why": w.text}
                for w in self.waiting
            ],
        }

    def lines(self) -> list[str]:
        j = self.jobs
        out = [
            f"scenario {self.scenario}, seed {self.seed}: {self.steps} steps, "
            f"{self.simulated_seconds:g} simulated seconds, {self.wall_seconds:.2f} s wall",
            f"jobs: {j.get('succeeded', 0)} succeeded, {j.get('failed', 0)} failed, "
            f"{j.get('cancelled', 0)} cancelled, {j.get('waiting', 0)} waiting, "
            f"{j.get('active', 0)} still active (of {j.get('total', 0)})",
            f"GPU utilisation (reserved): {self.gpu_utilisation:.1%}",
            f"scheduling passes: {self.passes}; placements: {self.placements} "
            f"({self.placements_per_sim_second:.3f}/simulated s, "
            f"{self.placements_per_wall_second:.0f}/wall s)",
            "faults: "
            + (", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()) if v) or "none")
            + f"; coordinator crashes that fired {self.crashes}",
            f"invariants checked {self.invariant_checks} times: all held",
        ]
        unfinished = j.get("waiting", 0) + j.get("active", 0)
        for w in self.waiting[:10]:
            out.append(f"  {w.job_id} {w.state} ({w.kind}): {w.text}")
        if unfinished > 10:
            out.append(f"  … and {unfinished - 10} more unfinished")
        out.append(f"trace sha256: {self.trace_hash}")
        return out


class InvariantViolated(Exception):
    def __init__(self, scenario: str, seed: int, step: int, violations: list[Violation]) -> None:
        self.scenario, self.seed, self.step, self.violations = scenario, seed, step, violations
        first = violations[0]
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(
            f"invariant {first.invariant!r} violated at step {step} (scenario {scenario}, seed "
            f"{seed}): {first}{more}"
        )


class Simulation:
    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        *,
        steps: int | None = None,
        trace: Callable[[str], None] | None = None,
        explain: int = 50,
    ) -> None:
        self.scenario = scenario
        self.explain = explain
        self.seed = seed
        self.max_steps = steps if steps is not None else scenario.steps
        self.trace_sink = trace
        self.wall: dict[str, float] = {}
        self.faults_rng = random.Random(f"{seed}/faults")
        self.launch_rng = random.Random(f"{seed}/launches")
        self.forced: list[str] = []  # refusals queued by scheduled faults
        self.plans = self._plan_workload(random.Random(f"{seed}/workload"))
        self.by_job: dict[str, JobPlan] = {}
        self.world = World(
            scenario.pools,
            scenario.queues,
            scenario.profiles,
            fate=self._fate,
            refusal=self._refusal,
            snapshot_limit=scenario.snapshot_limit,
            batch=scenario.batch,
        )
        self.hasher = hashlib.sha256()
        self.states: dict[str, str] = {}  # job → state, for jobs not final
        self.final: dict[str, str] = {}
        self.live: dict[str, Reservation] = {}
        self.outages: dict[str, tuple[int, bool]] = {}  # node → (step it ends, declare lost?)
        self.arrived: list[str] = []  # job ids by arrival
        self.fault_counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.crashes = 0
        self.checks = 0
        self.gpu_seconds = 0.0
        self.total_gpus = sum(p.pool.gpus_per_node * p.nodes for p in scenario.pools)

    # -- seeded workload and fates ------------------------------------------------------------

    def _plan_workload(self, rng: random.Random) -> list[JobPlan]:
        w = self.scenario.workload
        shapes = w.shapes
        weights = [s.weight for s in shapes]
        queues = [q.name for q in self.scenario.queues]
        plans = []
        for i in range(w.jobs):
            k = rng.choices(range(len(shapes)), weights)[0]
            shape = shapes[k]
            step = 1 + rng.randrange(w.arrival_steps)
            queue = shape.queue or rng.choice(queues)
            duration = rng.uniform(*shape.duration)
            failing = rng.randrange(32) if rng.random() < shape.fail else None
            plans.append(JobPlan(i + 1, step, k, queue, duration, failing, rng.uniform(0.05, 1)))
        return sorted(plans, key=lambda p: (p.step, p.arrival))

    def _fate(self, request: LaunchRequest) -> tuple[float, int] | None:
        plan = self.by_job.get(request.job_id)
        if plan is None:
            return None
        if plan.failing is not None and plan.failing % request.spec.members == request.member_index:
            return plan.duration * plan.fail_at, 1
        return plan.duration, 0

    def _refusal(self, request: LaunchRequest) -> TunePlaneError | None:
        f = self.scenario.faults
        kind = self.forced.pop(0) if self.forced else None
        if kind is None and (f.refuse or f.unavailable):
            x = self.launch_rng.random()
            kind = (
                "refuse"
                if x < f.refuse
                else "unavailable"
                if x < f.refuse + f.unavailable
                else None
            )
        if kind is not None:
            self.fault_counts[kind] += 1
        if kind == "refuse":
            return InvalidInput(
                f"node refused member {request.member_index}: image cannot be prepared",
                fix="simulated refusal",
            )
        if kind == "unavailable":
            return Unavailable("node busy preparing the image", fix="simulated: retry later")
        return None

    # -- the loop ---------------------------------------------------------------------------

    def _emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        self.hasher.update(line.encode() + b"\n")
        if self.trace_sink is not None:
            self.trace_sink(line)

    async def run(self) -> Summary:
        started = time.perf_counter()  # wall time for the summary only, never in the trace
        w = self.world
        await w.setup()
        self._emit(
            {
                "scenario": self.scenario.name,
                "seed": self.seed,
                "nodes": len(self.scenario.nodes),
                "gpus": self.total_gpus,
                "jobs": len(self.plans),
            }
        )
        pending_plans = list(self.plans)
        scheduled = list(self.scenario.scheduled)
        step = quiet = 0
        for step in range(1, self.max_steps + 1):
            w.clock.advance(self.scenario.step_seconds)
            exited = [h for b in w.sim_backends for h in b.advance()]
            arrived: list[str] = []
            mark = time.perf_counter()
            while pending_plans and pending_plans[0].step <= step:
                plan = pending_plans.pop(0)
                shape = self.scenario.workload.shapes[plan.shape]
                job_id = await w.submit(shape.profiles, plan.queue)
                self.by_job[job_id] = plan
                self.arrived.append(job_id)
                self.states[job_id] = JobState.PENDING
                arrived.append(job_id)
            mark = self._lap("arrivals", mark)
            faults, crash = await self._faults(step, [s for s in scheduled if s.step == step])
            mark = self._lap("faults", mark)
            outcome = await w.tick(crash)
            if outcome.crashed is not None:
                self.crashes += 1
            mark = self._lap("ticks", mark)
            # right after a crash, members declared lost may still wait for the tick that
            # releases their reservation: that part is checked after the next whole tick
            seen = await w.inspect(settled=outcome.crashed is None)
            self.checks += 1
            if seen.violations:
                self._emit({"step": step, "violations": [str(v) for v in seen.violations]})
                raise InvariantViolated(self.scenario.name, self.seed, step, seen.violations)
            mark = self._lap("checks", mark)
            changes, added, removed = await self._diff(seen)
            self.gpu_seconds += sum(r.gpus for r in self.live.values()) * self.scenario.step_seconds
            self._emit(
                {
                    "step": step,
                    "t": w.clock.elapsed,
                    "exited": exited,
                    "arrived": arrived,
                    "faults": faults,
                    "crash": str(outcome.crashed) if outcome.crashed else None,
                    "placed": [sorted(r.reserved) for r in outcome.passes],
                    "lost": [sorted(r.lost) for r in outcome.passes if r.lost],
                    "jobs": changes,
                    "reserved": added,
                    "released": removed,
                }
            )
            # nothing more can happen once two steps in a row were quiet (the pass of a tick
            # runs before that tick records the exits that free capacity)
            quiet = quiet + 1 if not pending_plans and self._quiet(step, scheduled, outcome) else 0
            self._lap("trace", mark)
            if quiet >= 2:
                break
        mark = time.perf_counter()
        waiting = await self._explain()
        self._lap("explain", mark)
        self._emit({"end": step, "waiting": [[x.job_id, x.kind, x.text] for x in waiting]})
        wall = time.perf_counter() - started
        counts: dict[str, int] = {}
        for state in self.final.values():
            counts[state] = counts.get(state, 0) + 1
        counts["waiting"] = sum(1 for s in self.states.values() if s == JobState.PENDING)
        counts["active"] = sum(1 for s in self.states.values() if s != JobState.PENDING)
        counts["total"] = len(self.arrived)
        simulated = w.clock.elapsed
        return Summary(
            scenario=self.scenario.name,
            seed=self.seed,
            steps=step,
            simulated_seconds=simulated,
            wall_seconds=wall,
            trace_hash=self.hasher.hexdigest(),
            jobs=counts,
            gpu_utilisation=(
                self.gpu_seconds / (self.total_gpus * simulated)
                if self.total_gpus and simulated
                else 0.0
            ),
            passes=len(w.results),
            placements=sum(len(r.reserved) for r in w.results),
            crashes=self.crashes,
            faults={k: v for k, v in self.fault_counts.items() if v},
            invariant_checks=self.checks,
            waiting=waiting,
            wall_split=dict(self.wall),
        )

    def _lap(self, what: str, since: float) -> float:
        """Add the wall time since ``since`` to ``what`` (summary only, never the trace)."""
        now = time.perf_counter()
        self.wall[what] = self.wall.get(what, 0.0) + now - since
        return now

    def _quiet(self, step: int, scheduled: list[ScheduledFault], outcome: TickOutcome) -> bool:
        """Nothing more can happen: no job runs, no outage is open, no fault is due, and the
        last pass placed nothing."""
        return (
            outcome.crashed is None
            and bool(outcome.passes)
            and not any(s != JobState.PENDING for s in self.states.values())
            and not self.outages
            and not any(s.step > step for s in scheduled)
            and not any(r.reserved for r in outcome.passes)
        )

    async def _faults(
        self, step: int, due: list[ScheduledFault]
    ) -> tuple[list[str], CrashPoint | None]:
        """Apply this step's faults (scheduled ones first, then seeded ones); return what
        happened and the crash point armed for the tick."""
        w, f, rng = self.world, self.scenario.faults, self.faults_rng
        done: list[str] = []
        crash: CrashPoint | None = None
        for node, (end, lose) in sorted(self.outages.items()):
            if end <= step:
                del self.outages[node]
                done.append(await self._resolve(node, lose))
        for s in due:
            if s.kind not in ("refuse", "unavailable", "declare-lost"):  # counted where done
                self.fault_counts[s.kind] += 1
            if s.kind == "crash":
                crash = s.point or self._crash_point(rng)
                done.append(f"crash armed {crash}")
            elif s.kind == "disconnect" and s.node is not None:
                ok = await w.disconnect(s.node)
                done.append(f"disconnect {s.node}" + ("" if ok else " (no change)"))
            elif s.kind == "reconnect" and s.node is not None:
                self.outages.pop(s.node, None)
                ok = await w.reconnect(s.node)
                done.append(f"reconnect {s.node}" + ("" if ok else " (no change)"))
            elif s.kind == "declare-lost" and s.node is not None:
                self.outages.pop(s.node, None)
                done.append(await self._resolve(s.node, True))
            elif s.kind == "cancel" and s.job is not None:
                if s.job <= len(self.arrived):
                    job_id = self.arrived[s.job - 1]
                    done.append(f"cancel {job_id}: {await w.cancel(job_id)}")
            elif s.kind in ("refuse", "unavailable"):
                self.forced.extend([s.kind] * s.count)
                done.append(f"{s.kind} next {s.count} launch(es)")
        if f.crash and rng.random() < f.crash and crash is None:
            crash = self._crash_point(rng)
            self.fault_counts["crash"] += 1
            done.append(f"crash armed {crash}")
        if f.disconnect and rng.random() < f.disconnect:
            candidates = await self._connected()
            if candidates:
                node = rng.choice(candidates)
                low, high = f.outage_steps
                lose = rng.random() < f.declare_lost
                self.outages[node] = (step + rng.randint(low, high), lose)
                await w.disconnect(node)
                self.fault_counts["disconnect"] += 1
                done.append(f"disconnect {node}")
        if f.cancel and rng.random() < f.cancel:
            open_jobs = sorted(self.states)
            if open_jobs:
                job_id = rng.choice(open_jobs)
                self.fault_counts["cancel"] += 1
                done.append(f"cancel {job_id}: {await w.cancel(job_id)}")
        return done, crash

    async def _resolve(self, node: str, lose: bool) -> str:
        if lose:
            self.fault_counts["declare-lost"] += 1
            failed = await self.world.declare_lost(node)
            return f"declare-lost {node}: {failed} member(s) failed"
        self.fault_counts["reconnect"] += 1
        ok = await self.world.reconnect(node)
        return f"reconnect {node}" + ("" if ok else " (no change)")

    async def _connected(self) -> list[str]:
        async with self.world.api.uow() as uow:
            nodes = await uow.fleet.nodes()
        return sorted(n.name for n in nodes if n.connectivity is Connectivity.CONNECTED)

    @staticmethod
    def _crash_point(rng: random.Random) -> CrashPoint:
        kind = rng.choice(CRASH_KINDS)
        return CrashPoint(kind, 1 + rng.randrange(8 if kind != "after-launch" else 4))

    async def _diff(self, seen: Inspection) -> tuple[list[list[str]], list[list[Any]], list[str]]:
        """Job state changes and reservations taken/released since the last step."""
        now: dict[str, str] = dict(seen.states)
        gone = sorted(set(self.states) - set(now))
        if gone:
            async with self.world.api.uow() as uow:
                for job_id in gone:
                    job = await uow.jobs.get(job_id)
                    if job is not None:
                        now[job_id] = job.state
        live = {r.attempt_id: r for r in seen.live}
        changes = []
        for job_id in sorted(now):
            old = self.states.get(job_id)
            if now[job_id] != old:
                changes.append([job_id, str(old), str(now[job_id])])
            if now[job_id] in JOB_FINAL:
                self.states.pop(job_id, None)
                self.final[job_id] = str(now[job_id])
            else:
                self.states[job_id] = str(now[job_id])
        added = [
            [a, live[a].job_id, [[x.node, list(x.gpus)] for x in live[a].assignments]]
            for a in sorted(set(live) - set(self.live))
        ]
        removed = sorted(set(self.live) - set(live))
        self.live = live
        return changes, added, removed

    async def _explain(self) -> list[Waiting]:
        """Why each unfinished job is where it is, through `tp job why`'s use case (each call
        runs a whole admission pass with texts, so at most ``explain`` of them)."""
        out = []
        for job_id in sorted(self.states)[: self.explain]:
            why = await explain_job(self.world.api, OPERATOR, job_id)
            out.append(Waiting(job_id, why.state, str(why.kind), why.text))
        return out


async def run_scenario(
    scenario: Scenario,
    seed: int,
    *,
    steps: int | None = None,
    trace: Callable[[str], None] | None = None,
    explain: int = 50,
) -> Summary:
    """Run ``scenario`` with ``seed``; raises InvariantViolated at the first violation.
    ``explain``: how many unfinished jobs the summary explains (lowest ids first)."""
    return await Simulation(scenario, seed, steps=steps, trace=trace, explain=explain).run()
