"""What a simulator run plans and reports: the workload plan, the summary and the invariant
failure (docs/simulator.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.sim import Violation


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
    retries: int = 0  # attempts its jobs' retry policies started after the first
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
            "retries": self.retries,
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
            f"retries: {self.retries} attempts after an end their jobs' policies retry",
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
