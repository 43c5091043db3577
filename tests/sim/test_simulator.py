"""The simulator: determinism of the trace hash, the faults scenario over 200 seeds, scenario
files with clear errors, the `tp sim` command, and the pieces it is built from."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapters.memory import MemoryStore, MemoryUnitOfWork
from adapters.sim import (
    Crash,
    CrashPlan,
    CrashPoint,
    Inspection,
    SimBackend,
    SimClock,
    Violation,
    inspect,
)
from adapters.sim.faults import CrashingBackend, crashing
from domain.admission import Assignment, WaitKind
from domain.catalog import RuntimePin
from domain.errors import InvalidInput, Unavailable
from domain.fleet import Pool, Queue, Team
from domain.ports import LaunchRequest
from entrypoints import sim, sim_world
from entrypoints.cli.main import run
from entrypoints.sim import InvariantViolated, World
from entrypoints.sim_scenario import PoolSpec, load_scenario, parse_scenario
from tests.unit.builders import a_spec

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "deploy/sim/small.toml"
FAULTS = ROOT / "deploy/sim/faults.toml"
LARGE = ROOT / "deploy/sim/large.toml"
A = Pool("a", "sim", "node", 8, 96, 1_048_576, "h200")
SEEDS = 200


def trace_of(path: Path, seed: int, **kw: Any) -> tuple[sim.Summary, list[str]]:
    import asyncio

    lines: list[str] = []
    summary = asyncio.run(sim.run_scenario(load_scenario(path), seed, trace=lines.append, **kw))
    return summary, lines


# -- determinism ------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_trace_and_hash_and_another_seed_another() -> None:
    one, lines_one = trace_of(FAULTS, 1)
    two, lines_two = trace_of(FAULTS, 1)
    assert lines_one == lines_two
    assert one.trace_hash == two.trace_hash
    assert len(one.trace_hash) == 64
    other, _ = trace_of(FAULTS, 2)
    assert other.trace_hash != one.trace_hash
    small, _ = trace_of(SMALL, 1)
    assert small.trace_hash == trace_of(SMALL, 1)[0].trace_hash != trace_of(SMALL, 2)[0].trace_hash


def test_the_hash_does_not_depend_on_the_interpreter_s_hash_seed() -> None:
    """No iteration over unordered data reaches the trace: two processes with different
    PYTHONHASHSEED print the same hash."""
    hashes = set()
    for hash_seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "entrypoints.cli.main", "sim", "--scenario", str(FAULTS),
             "--seed", "4", "--json"],
            cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True,
            text=True, check=True, timeout=120,
        )  # fmt: skip
        hashes.add(json.loads(done.stdout)["trace_hash"])
    assert hashes == {trace_of(FAULTS, 4)[0].trace_hash}


def test_the_trace_is_canonical_json_one_line_per_step() -> None:
    summary, lines = trace_of(FAULTS, 3)
    records = [json.loads(line) for line in lines]
    assert records[0] == {"gpus": 32, "jobs": 16, "nodes": 6, "scenario": "faults", "seed": 3}
    assert [r["step"] for r in records[1:-1]] == list(range(1, summary.steps + 1))
    assert records[-1]["end"] == summary.steps
    for line, record in zip(lines, records, strict=True):
        assert line == json.dumps(record, sort_keys=True, separators=(",", ":"))


# -- 200 seeds of faults ----------------------------------------------------------------------


@pytest.mark.slow
def test_the_faults_scenario_keeps_every_invariant_over_200_seeds() -> None:
    """Crashes at every kind of point, node loss (reconnected or declared lost), refused and
    deferred launches and cancels: every invariant holds after every step, and every job ends
    final, or waiting with a `tp job why` explanation."""
    seen: dict[str, int] = {}
    crashes = finished = 0
    for seed in range(SEEDS):
        summary, _ = trace_of(FAULTS, seed)  # raises InvariantViolated naming step and seed
        assert summary.invariant_checks == summary.steps
        assert summary.jobs["active"] == 0, (seed, summary.waiting)
        assert len(summary.waiting) == summary.jobs["waiting"]
        for w in summary.waiting:
            assert w.state == "pending" and w.kind in set(WaitKind), (seed, w)
            assert w.text.startswith("needs "), (seed, w)
        for kind, n in summary.faults.items():
            seen[kind] = seen.get(kind, 0) + n
        crashes += summary.crashes
        finished += sum(summary.jobs.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
    assert set(seen) == set(sim.FAULT_KINDS), seen  # every kind of fault was exercised
    assert crashes > SEEDS // 2 and finished > SEEDS * 10


# -- scenario files ---------------------------------------------------------------------------


def test_the_example_scenarios_load() -> None:
    small, faults, large = (load_scenario(p) for p in (SMALL, FAULTS, LARGE))
    assert (small.name, faults.name, large.name) == ("small", "faults", "large")
    assert len(large.nodes) == 1000 and {p.pool.gpus_per_node for p in large.pools} == {8}
    assert large.workload.jobs == 10_000 and large.workload.arrival_steps == 1
    assert faults.faults.crash > 0 and faults.scheduled


BASE: dict[str, Any] = {
    "name": "t",
    "pools": [{"name": "a", "gpu_model": "h200", "gpus_per_node": 8, "nodes": 2}],
    "workload": {"jobs": 2, "shapes": [{"profiles": ["h200:8"]}]},
}


def bad(change: dict[str, Any], path: tuple[Any, ...] = ()) -> InvalidInput:
    data = json.loads(json.dumps(BASE))
    target = data
    for key in path:
        target = target[key]
    target.update(change)
    with pytest.raises(InvalidInput) as e:
        parse_scenario(data, "s.toml")
    return e.value


@pytest.mark.parametrize(
    ("change", "path", "field", "says"),
    [
        ({"gpus_per_nod": 8}, ("pools", 0), "pools[0].gpus_per_nod", "not a known key"),
        ({"nodes": "two"}, ("pools", 0), "pools[0].nodes", "must be an integer, not 'two'"),
        ({"gpus_per_node": 99}, ("pools", 0), "pools[0].gpus_per_node", "is 99"),
        ({"gpu_model": None}, ("pools", 0), None, None),
        ({"fail": 2}, ("workload", "shapes", 0), "workload.shapes[0].fail", "is 2"),
        (
            {"profiles": ["h100:8"]},
            ("workload", "shapes", 0),
            "workload.shapes[0].profiles",
            "no pool of h100 GPUs",
        ),
        (
            {"queue": "nope"},
            ("workload", "shapes", 0),
            "workload.shapes[0].queue",
            "names no queue",
        ),
        (
            {"duration": [5, 1]},
            ("workload", "shapes", 0),
            "workload.shapes[0].duration",
            "is [5, 1]",
        ),
        ({"steps": 0}, (), "steps", "is 0"),
        ({"faults": {"crash": -1}}, (), "faults.crash", "is -1"),
        ({"faults": {"at": [{"step": 1, "kind": "meteor"}]}}, (), "faults.at[0].kind", "meteor"),
        (
            {"faults": {"at": [{"step": 1, "kind": "disconnect", "node": "b-9"}]}},
            (),
            "faults.at[0].node",
            "names no node",
        ),
        (
            {"faults": {"at": [{"step": 1, "kind": "crash", "point": "after-tea 1"}]}},
            (),
            "faults.at[0].point",
            "after-tea",
        ),
        ({"queues": [{"name": "q", "priority": 5000}]}, (), "queues[0].priority", "is 5000"),
    ],
)
def test_a_bad_scenario_is_refused_naming_the_key(
    change: dict[str, Any], path: tuple[Any, ...], field: str | None, says: str | None
) -> None:
    if field is None:  # a GPU pool without a model: the domain's own check, with the path
        err = bad({"gpu_model": "h200", "gpus_per_node": 0}, path)
        assert err.field == "pools[0].gpu_model" and "s.toml" in err.message
        return
    err = bad(change, path)
    assert err.field == field, err
    assert says is not None and err.message.startswith(f"s.toml: {field} "), err.message
    assert says in err.message, err.message
    assert err.fix


def test_a_missing_or_broken_scenario_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        load_scenario(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(InvalidInput, match="not valid TOML"):
        load_scenario(broken)


# -- the command ------------------------------------------------------------------------------


def test_tp_sim_prints_the_summary_and_the_trace_hash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    expected, lines = trace_of(FAULTS, 5)
    trace = tmp_path / "trace.jsonl"
    assert run(["sim", "--scenario", str(FAULTS), "--seed", "5", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert f"trace sha256: {expected.trace_hash}" in out
    assert "invariants checked" in out and "GPU utilisation" in out and "placements" in out
    assert trace.read_text().splitlines() == lines

    assert run(["sim", "--scenario", str(FAULTS), "--seed", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trace_hash"] == expected.trace_hash
    assert data["jobs"] == expected.jobs and data["placements"] == expected.placements


def test_tp_sim_refuses_a_bad_scenario_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n[[pools]]\nname = "a"\ngpus = 8\n')
    assert run(["sim", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "pools[0].gpus is not a known key" in err and "field: pools[0].gpus" in err


def _planted(step: int) -> Any:
    """``inspect`` that reports a violation from ``step`` on."""
    real = inspect

    async def fake(uow: Any, backends: Any, *, settled: bool = True) -> Inspection:
        seen = await real(uow, backends, settled=settled)
        if backends and backends[0].clock.elapsed >= step * 60:
            bad = Violation("capacity", "node a-0: 9 GPUs reserved + 0 free != 8 capacity")
            return dataclasses.replace(seen, violations=[bad])
        return seen

    return fake


def test_a_violated_invariant_stops_the_run_naming_step_seed_and_invariant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sim_world, "inspect", _planted(4))
    with pytest.raises(InvariantViolated) as e:
        trace_of(FAULTS, 9)
    assert (e.value.step, e.value.seed, e.value.scenario) == (4, 9, "faults")
    assert str(e.value).startswith(
        "invariant 'capacity' violated at step 4 (scenario faults, "
        "seed 9): capacity (reserved + free = capacity"
    )
    assert run(["sim", "--scenario", str(FAULTS), "--seed", "9"]) == 1
    err = capsys.readouterr().err
    assert "invariant 'capacity' violated at step 4" in err and "--seed 9" in err


# -- the pieces -------------------------------------------------------------------------------

PIN = RuntimePin("sim", "sim/runtime:1", "sha256:" + "0" * 64, None, "single-process")


def request(member: str, node: str = "a-0", index: int = 0) -> LaunchRequest:
    a = Assignment(index, "main", node, (0,), 1000, 1024)
    return LaunchRequest("job-1", "att-1", member, index, a_spec(), None, a)


async def test_the_simulated_backend_runs_members_for_their_time_and_loses_contact() -> None:
    clock = SimClock()
    backend = SimBackend("node", clock, fate=lambda r: (60.0, 3 if r.member_index else 0))
    h0 = await backend.launch(request("m0"))
    h1 = await backend.launch(request("m1", "a-1", 1))
    assert await backend.launch(request("m0")) == h0 and backend.launches == 2  # idempotent
    clock.advance(59)
    assert backend.advance() == [] and (await backend.observe(h0)).status == "running"
    backend.disconnect("a-1")
    clock.advance(1)
    assert backend.advance() == [h0, h1]  # both end, contact or not
    assert (await backend.observe(h0)).exit_code == 0
    assert (await backend.observe(h1)).status == "unknown"
    with pytest.raises(Unavailable):
        await backend.stop(h1, 0)
    with pytest.raises(Unavailable, match="out of contact"):
        await backend.launch(request("m2", "a-1"))
    backend.reconnect("a-1")
    assert (await backend.observe(h1)).exit_code == 3
    assert backend.running() == []


async def test_a_refused_launch_starts_nothing() -> None:
    refusals = [InvalidInput("no", fix="none"), Unavailable("busy", fix="later"), None]
    backend = SimBackend("node", SimClock(), refusal=lambda r: refusals.pop(0))
    with pytest.raises(InvalidInput):
        await backend.launch(request("m0"))
    with pytest.raises(Unavailable):
        await backend.launch(request("m0"))
    assert backend.members == {} and backend.refused == 2
    handle = await backend.launch(request("m0"))
    assert [h for h, _ in backend.running()] == [handle]


async def test_a_crash_before_a_commit_keeps_nothing_and_after_it_keeps_everything() -> None:
    plan = CrashPlan()
    for point, kept in (
        (CrashPoint("before-commit", 2), []),
        (CrashPoint("after-commit", 2), ["x"]),
    ):
        store = MemoryStore()
        factory = crashing(lambda s=store: MemoryUnitOfWork(s), plan)  # type: ignore[misc]
        plan.arm(point)
        async with factory() as uow:
            await uow.policy.put_team(Team("w"))
            await uow.commit()  # the first commit goes through
        with pytest.raises(Crash):
            async with factory() as uow:
                await uow.policy.put_team(Team("x"))
                await uow.commit()
        assert plan.fired == point
        async with MemoryUnitOfWork(store) as uow:
            assert [t.name for t in await uow.policy.teams()] == ["w", *kept]
    inner = SimBackend("node", SimClock())
    backend = CrashingBackend(inner, plan)
    plan.arm(CrashPoint("after-launch", 1))
    with pytest.raises(Crash):
        await backend.launch(request("m0"))
    assert len(inner.running()) == 1  # it started; the caller died before recording it


async def test_the_invariants_catch_a_reservation_released_under_running_members() -> None:
    world = World([PoolSpec(A, 2)], [Queue("default", "research")])
    await world.setup()
    job = await world.submit(["h200:16"], "default")
    await world.tick()
    assert await world.check() == []
    async with world.api.uow() as uow:
        [attempt] = await uow.attempts.for_job(job)
        assert await uow.reservations.release(attempt.id)
        await uow.commit()
    found = {v.invariant for v in await world.check()}
    assert found == {"double-booking", "held-by-live-attempt"}
