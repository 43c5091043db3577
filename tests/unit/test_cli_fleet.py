"""`tp fleet …`, `tp queue …` and `tp profiles` against the stub HTTP server of test_cli_admin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from entrypoints.cli import errors
from entrypoints.cli.main import run
from tests.unit.test_cli_admin import Stub, problem, stub  # noqa: F401  (the fixture)

pytestmark = pytest.mark.unit


def _node(name: str, pool: str, gpus: int, used: int, sched: str = "schedulable") -> Any:
    return {"name": name, "pool": pool, "sched": sched, "connectivity": "connected",
            "eligible": sched == "schedulable", "gpus_total": gpus, "gpus_used": used,
            "cpus_total": 96.0, "cpus_used": 12 * used, "memory_mb_total": 1048576,
            "memory_mb_used": 131072 * used, "members": 1 if used else 0,
            "validation": "unchecked" if sched == "schedulable" else "failed",
            "validation_reason": "", "validated_at": None}  # fmt: skip


CHECK = {
    "id": "chk-1",
    "pool": "a",
    "job_id": "job-1",
    "nodes": ["a-0", "a-1"],
    "started_at": "2026-12-03T18:34:00Z",
    "finished_at": "2026-12-03T18:34:29Z",
    "ok": False,
    "note": "",
    "results": [
        {"node": "a-0", "ok": True, "detail": "1 of 1 peers reached"},
        {"node": "a-1", "ok": False, "detail": "unreachable from a-0 on 10.0.0.2:29501"},
    ],
}


H200_X8 = {
    "devices": [{"index": i, "uuid": f"GPU-{i}", "name": "NVIDIA H200", "memory_mb": 143771,
                 "mig": i == 7, "nvlink": True} for i in range(8)],
    "driver": "580.159.03", "cuda": "13.0", "source": "nvml",
}  # fmt: skip

FLEET = {"pools": [
    {"name": "a", "fleet": "dc1", "backend": "node", "gpu_model": "h200", "gpus_per_node": 8,
     "cpus_per_node": 96.0, "memory_mb_per_node": 1048576, "description": "",
     "gpus_total": 16, "gpus_used": 8, "last_check": CHECK,
     "nodes": [_node("a-0", "a", 8, 8) | {"gpu_inventory": H200_X8},
               _node("a-1", "a", 8, 0, "cordoned")]},
    {"name": "b", "fleet": "dc1", "backend": "node", "gpu_model": "h100", "gpus_per_node": 8,
     "cpus_per_node": 64.0, "memory_mb_per_node": 524288, "description": "",
     "gpus_total": 0, "gpus_used": 0, "nodes": [], "last_check": None},
]}  # fmt: skip
POOL_B = {k: v for k, v in FLEET["pools"][1].items()
          if k not in ("nodes", "gpus_total", "gpus_used", "last_check")}  # fmt: skip


def test_fleet_ls_shows_states_apart_and_usage(
    stub: Stub,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub.answers[("GET", "/v1/fleet")] = (200, FLEET)
    assert run(["fleet", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FLEET", "POOL", "NODE", "SCHED", "CONNECTIVITY", "CHECK", "GPUS",
                                "USED", "CPUS", "USED", "MEMORY", "USED", "DETECTED",
                                "GPUS"]  # fmt: skip
    assert lines[1].split() == ["dc1", "a", "a-0", "schedulable", "connected", "unchecked", "8/8",
                                "h200", "96/96", "1024.0/1024.0", "GiB", "8×", "NVIDIA", "H200",
                                "140.4", "GiB", "MIG", "on", "1", "NVLink,", "driver",
                                "580.159.03,", "CUDA", "13.0"]  # fmt: skip
    assert lines[2].split()[2:7] == ["a-1", "cordoned", "connected", "failed", "0/8"]
    assert "(no nodes)" in lines[3]
    assert lines[4] == "pool a: check chk-1 FAILED at 2026-12-03T18:34:29Z: a-1"  # pool b: none
    assert len(lines) == 5
    assert run(["fleet", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == FLEET


def test_pool_and_node_commands(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    stub.answers[("POST", "/v1/pools")] = (201, POOL_B)
    add = ["fleet", "pool", "add", "b", "--backend", "node", "--gpus", "8", "--gpu-model", "h100",
           "--cpus", "64", "--memory-mb", "524288", "--fleet", "dc1"]  # fmt: skip
    assert run(add) == 0
    assert stub.body("POST", "/v1/pools") == {
        "name": "b", "fleet": "dc1", "backend": "node", "gpu_model": "h100", "gpus_per_node": 8,
        "cpus_per_node": 64.0, "memory_mb_per_node": 524288, "description": "",
    }  # fmt: skip
    assert "created pool b (fleet dc1, backend node): 8× h100, 64 CPUs" in capsys.readouterr().out
    stub.answers[("PATCH", "/v1/pools/b")] = (200, {**POOL_B, "gpus_per_node": 0,
                                                    "gpu_model": None})  # fmt: skip
    assert run(["fleet", "pool", "set", "b", "--cpu-only", "--cpus", "32"]) == 0
    assert stub.body("PATCH", "/v1/pools/b") == {
        "cpus_per_node": 32.0, "gpus_per_node": 0, "gpu_model": None,
    }  # fmt: skip
    assert "CPU pool" in capsys.readouterr().out
    assert run(["fleet", "pool", "set", "b"]) == errors.USAGE
    assert "nothing to change" in capsys.readouterr().err
    stub.answers[("PATCH", "/v1/pools/a")] = problem(
        409, "conflict", "pool a has live reservations (2); its node shape and backend cannot "
        "change now", "cordon its nodes, wait for their jobs to end, then change the pool",
    )  # fmt: skip
    assert run(["fleet", "pool", "set", "a", "--gpus", "4"]) == errors.CONFLICT
    assert "fix: cordon its nodes" in capsys.readouterr().err

    node = {"name": "b-0", "pool": "b", "sched": "schedulable", "connectivity": "connected",
            "eligible": True}  # fmt: skip
    stub.answers[("POST", "/v1/nodes")] = (201, node)
    assert run(["fleet", "node", "add", "b-0", "--pool", "b"]) == 0
    assert stub.body("POST", "/v1/nodes") == {"name": "b-0", "pool": "b"}
    for action, sched in (("cordon", "cordoned"), ("drain", "draining"),
                          ("uncordon", "schedulable")):  # fmt: skip
        stub.answers[("POST", f"/v1/nodes/b-0/{action}")] = (200, {**node, "sched": sched})
        assert run(["fleet", "node", action, "b-0"]) == 0
        assert f"node b-0 in pool b: {sched}, connected" in capsys.readouterr().out
    stub.answers[("PUT", "/v1/nodes/b-0")] = (200, {**node, "pool": "a"})
    assert run(["fleet", "node", "set", "b-0", "--pool", "a"]) == 0
    assert stub.body("PUT", "/v1/nodes/b-0") == {"pool": "a"}
    assert run(["fleet", "node", "cordon", "nope"]) == errors.NOT_FOUND


FILE = """
fleet = "dc1"

[[pools]]
name = "a"
backend = "node"
gpu_model = "h200"
gpus_per_node = 8
cpus_per_node = 96
memory_mb_per_node = 1048576
nodes = 4

[[pools]]
name = "b"
backend = "node"
gpu_model = "h100"
gpus_per_node = {gpus}
cpus_per_node = 64
memory_mb_per_node = 524288
nodes = ["b-0"]

[[teams]]
name = "research"

[[queues]]
name = "research"
team = "research"
priority = 10
gpu_quota = 32
"""


def test_fleet_apply_checks_the_file_then_sends_it(
    stub: Stub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(FILE.format(gpus='"eight"'))
    assert run(["fleet", "apply", str(path)]) == errors.USAGE
    err = capsys.readouterr().err
    assert "field: pools[1].gpus_per_node" in err and "Expected `int`, got `str`" in err
    assert not stub.seen  # nothing was sent
    path.write_text(FILE.format(gpus="8") + "\nsurprise = 1\n")
    assert run(["fleet", "apply", str(path)]) == errors.USAGE
    assert "surprise" in capsys.readouterr().err
    path.write_text("pools = [")
    assert run(["fleet", "apply", str(path)]) == errors.USAGE
    assert "not valid TOML" in capsys.readouterr().err
    assert run(["fleet", "apply", str(tmp_path / "missing.toml")]) == errors.USAGE
    assert "cannot read the fleet file" in capsys.readouterr().err

    path.write_text(FILE.format(gpus="8"))
    stub.answers[("POST", "/v1/fleet/apply")] = (
        200, {"created": ["pool a", "node a-0"], "changed": ["queue research"], "unchanged": 3},
    )  # fmt: skip
    assert run(["fleet", "apply", str(path)]) == 0
    sent = stub.body("POST", "/v1/fleet/apply")
    assert sent["fleet"] == "dc1" and sent["pools"][0]["nodes"] == 4
    assert sent["queues"] == [{"name": "research", "team": "research", "priority": 10,
                               "gpu_quota": 32, "job_quota": None,
                               "max_attempts": None}]  # fmt: skip
    captured = capsys.readouterr()
    assert "created pool a" in captured.out and "changed queue research" in captured.out
    assert "2 created, 1 changed, 3 unchanged" in captured.err
    stub.answers[("POST", "/v1/fleet/apply")] = problem(
        422, "invalid-input", "queues[0].team: queue research: no team research",
        "add it under [[teams]]", "queues[0].team",
    )  # fmt: skip
    assert run(["fleet", "apply", str(path)]) == errors.USAGE
    assert "field: queues[0].team" in capsys.readouterr().err


QUEUE = {"name": "r", "team": "research", "priority": 10, "gpu_quota": 32, "job_quota": None,
         "gpus_in_use": 16, "jobs_in_use": 2}  # fmt: skip


def test_queue_commands(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    stub.answers[("GET", "/v1/queues")] = (200, [QUEUE])
    assert run(["queue", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["r", "research", "10", "16/32", "2/-", "-"]
    stub.answers[("POST", "/v1/queues")] = (201, QUEUE)
    assert run(["queue", "add", "r", "--team", "research", "--priority", "10",
                "--gpu-quota", "32"]) == 0  # fmt: skip
    assert stub.body("POST", "/v1/queues") == {"name": "r", "team": "research", "priority": 10,
                                               "gpu_quota": 32, "job_quota": None,
                                               "max_attempts": None}  # fmt: skip
    assert "GPU quota 32, job quota none, attempts no cap" in capsys.readouterr().out
    assert run(["queue", "add", "r", "--team", "t", "--gpu-quota", "-3"]) == errors.USAGE
    assert "field: --gpu-quota" in capsys.readouterr().err
    stub.answers[("PATCH", "/v1/queues/r")] = (200, {**QUEUE, "gpu_quota": None, "job_quota": 0})
    assert run(["queue", "set", "r", "--gpu-quota", "none", "--job-quota", "0"]) == 0
    assert stub.body("PATCH", "/v1/queues/r") == {"gpu_quota": None, "job_quota": 0}
    assert run(["queue", "set", "r", "--max-attempts", "3"]) == 0
    assert stub.body("PATCH", "/v1/queues/r") == {"max_attempts": 3}
    capsys.readouterr()
    assert run(["queue", "set", "r", "--max-attempts", "0"]) == errors.USAGE
    assert "field: --max-attempts" in capsys.readouterr().err
    assert run(["queue", "set", "r"]) == errors.USAGE


PROFILES = [
    {"name": "big", "kind": "named", "request": "a/h200:16", "pool": "a", "backend": "node",
     "description": "two nodes", "members": 2, "max_count": None,
     "resources": {"cpus": 96.0, "memory_mb": 1048576, "gpus": 8, "gpu_model": "h200"}},
    {"name": "h200:N", "kind": "implicit", "request": "h200:N", "pool": "a", "backend": "node",
     "description": "N h200 GPUs: 1 to 8 on one node", "members": None, "resources": None,
     "max_count": 32},
    {"name": "cpu:N", "kind": "implicit", "request": "cpu:N", "pool": "local",
     "backend": "local", "description": "N CPUs, up to 4", "members": None, "resources": None,
     "max_count": 4},
]  # fmt: skip


def test_profiles_named_and_implicit(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    stub.answers[("GET", "/v1/profiles")] = (200, PROFILES)
    assert run(["profiles"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["PROFILE", "KIND", "STANDS"]
    assert "a/h200:16" in lines[1] and "2 × 8× h200, 96 CPUs, 1048576 MiB" in lines[1]
    assert lines[2].split()[:2] == ["h200:N", "implicit"] and "1 to 8" in lines[2]
    assert run(["profiles", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == PROFILES


def test_node_ls_shows_what_each_daemon_detected(
    stub: Stub,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    link = {"node": "a-0", "connected_at": "2026-12-05T13:00:00Z",
            "heartbeat_at": "2026-12-05T13:00:05Z", "gateway": "gw-1", "address": "10.0.0.1",
            "gpus": 8, "gpu_model": "h200", "cpus": 96.0, "memory_mb": 1048576,
            "daemon_version": "0.23", "epoch": 1}  # fmt: skip
    older = link | {"node": "a-1"}  # an older daemon: no gpu_inventory at all
    stub.answers[("GET", "/v1/node-links")] = (200, [link | {"gpu_inventory": H200_X8}, older])
    assert run(["node", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-2:] == ["DETECTED", "GPUS"]
    detected = "8× NVIDIA H200 140.4 GiB MIG on 1 NVLink, driver 580.159.03, CUDA 13.0"
    assert lines[1].endswith(detected)
    assert lines[2].split()[-1] == "0.23"  # nothing detected: an empty cell
