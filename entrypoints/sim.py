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

import hashlib
import json
import random
import time
from collections.abc import Callable
from typing import Any

from adapters.sim import CrashPoint, Inspection
from adapters.sim.faults import CRASH_KINDS
from application.explain import explain_job
from domain.admission import Reservation
from domain.errors import InvalidInput, TunePlaneError, Unavailable
from domain.fleet import Connectivity
from domain.lifecycle import JOB_FINAL, JobState
from domain.ports import LaunchRequest
from domain.retry import REQUEUED
from entrypoints.sim_scenario import FAULT_KINDS, Scenario, ScheduledFault
from entrypoints.sim_summary import InvariantViolated, JobPlan, Summary, Waiting
from entrypoints.sim_world import OPERATOR, TickOutcome, World

__all__ = ["FAULT_KINDS", "InvariantViolated", "Summary", "World", "run_scenario"]


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
        self.backoff = 0  # pending jobs the last inspection found queued again by a retry
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
                job_id = await w.submit(shape.profiles, plan.queue, shape.retry)
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
            self.backoff = seen.backoff
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
        retries = 0
        async with w.api.units.jobs() as uow:
            for job_id in self.arrived:
                made = await uow.attempts.for_job(job_id)
                retries += sum(1 for a in made[1:] if a.end != REQUEUED)
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
            retries=retries,
            waiting=waiting,
            wall_split=dict(self.wall),
        )

    def _lap(self, what: str, since: float) -> float:
        """Add the wall time since ``since`` to ``what`` (summary only, never the trace)."""
        now = time.perf_counter()
        self.wall[what] = self.wall.get(what, 0.0) + now - since
        return now

    def _quiet(self, step: int, scheduled: list[ScheduledFault], outcome: TickOutcome) -> bool:
        """Nothing more can happen: no job runs or waits for its retry backoff, no outage is
        open, no fault is due, and the last pass placed nothing."""
        return (
            outcome.crashed is None
            and not self.backoff
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
        async with self.world.api.units.fleet() as uow:
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
            async with self.world.api.units.jobs() as uow:
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
