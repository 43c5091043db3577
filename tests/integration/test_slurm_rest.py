"""Debian 12's slurmrestd (Slurm 22.05, OpenAPI v0.0.38) as the Slurm backend will use it: over its
unix socket with httpx, against the real cluster of tests/fixtures/slurm.py. This pins down what
the adapter of issue 8 builds on (see docs/slurm.md): the versions served, ping, nodes, batch
jobs with ``srun`` steps on two nodes, exit codes as raw wait statuses, hold, cancel, and the
errors of a bad submission.

With ``TUNEPLANE_SLURM_RECORD=1`` the tests also write what slurmrestd answered to
tests/fixtures/slurm_recorded/v0.0.38/ (see the README there); without it they check that those
recordings still have the shape the live server answers with.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.slurm import SlurmCluster

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _idle(slurm_cluster: SlurmCluster) -> None:
    """The cluster is shared by the session: wait until other tests' jobs have left."""
    slurm_cluster.wait_idle()


V = "v0.0.38"
API = f"/slurm/{V}"
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_recorded" / V
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def _shape(value: Any) -> Any:
    """The keys of every object, recursively (lists by their first item): what a recording keeps."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def _subset(recorded: Any, live: Any) -> bool:
    if isinstance(recorded, dict):
        return isinstance(live, dict) and all(
            k in live and _subset(v, live[k]) for k, v in recorded.items()
        )
    if isinstance(recorded, list):
        return isinstance(live, list) and (
            not recorded or not live or _subset(recorded[0], live[0])
        )
    return True


def record(name: str, resp: httpx.Response, request_body: Any = None) -> Any:
    """The response's JSON body. With TUNEPLANE_SLURM_RECORD=1 it is written to ``name``.json;
    otherwise, if ``name``.json exists, the live body must have every key the recording has."""
    body = resp.json()
    path = RECORDED / f"{name}.json"
    if os.environ.get("TUNEPLANE_SLURM_RECORD") == "1":
        RECORDED.mkdir(parents=True, exist_ok=True)
        entry = {
            "request": {
                "method": resp.request.method,
                "path": resp.request.url.path,
                "body": request_body,
            },
            "status": resp.status_code,
            "body": body,
        }
        path.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
    elif path.exists():
        saved = json.loads(path.read_text())
        assert saved["status"] == resp.status_code, f"{name}: status differs from the recording"
        assert _subset(_shape(saved["body"]), _shape(body)), f"{name}: live shape lost keys"
    return body


def job_body(script: str, cluster: SlurmCluster, **job: Any) -> dict[str, Any]:
    """A v0.0.38 submission: the script beside ``job``; ``environment`` is required."""
    props: dict[str, Any] = {
        "name": "tp-test",
        "current_working_directory": str(cluster.state),
        "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "standard_output": str(cluster.state / "job-%j.out"),
    }
    return {"script": script, "job": props | job}


async def submit(
    client: httpx.AsyncClient, body: dict[str, Any], name: str | None = None, errors: int = 0
) -> int:
    """Submit; the job id. A job that was created but will not start at once (held, too big for
    the partition) comes back with a ``job_id`` *and* ``errors``: ``errors`` says how many."""
    resp = await client.post(f"{API}/job/submit", json=body)
    data = record(name, resp, body) if name else resp.json()
    assert resp.status_code == 200 and len(data["errors"]) == errors, data
    return int(data["job_id"])


async def job(client: httpx.AsyncClient, job_id: int) -> dict[str, Any]:
    resp = await client.get(f"{API}/job/{job_id}")
    data = resp.json()
    assert resp.status_code == 200 and len(data["jobs"]) == 1, data
    return dict(data["jobs"][0])


async def wait_state(
    client: httpx.AsyncClient, job_id: int, states: set[str], within: float = 60
) -> httpx.Response:
    """Poll the job until its state is one of ``states``; the last response."""
    deadline = time.monotonic() + within
    while True:
        resp = await client.get(f"{API}/job/{job_id}")
        state = resp.json()["jobs"][0]["job_state"]
        if state in states:
            return resp
        assert state not in FINISHED, f"job {job_id} ended {state}, not {states}"
        assert time.monotonic() < deadline, f"job {job_id} still {state} after {within}s"
        await asyncio.sleep(0.2)


async def test_versions_ping_and_nodes(slurm_cluster: SlurmCluster) -> None:
    async with slurm_cluster.client() as client:
        spec = (await client.get("/openapi")).json()
        versions = {p.split("/")[2] for p in spec["paths"] if p.startswith("/slurm/")}
        assert versions == {"v0.0.36", "v0.0.37", "v0.0.38"}

        ping = record("ping", await client.get(f"{API}/ping"))
        assert ping["meta"]["Slurm"]["release"].startswith("22.05.")
        assert [p["ping"] for p in ping["pings"]] == ["UP"]

        nodes = record("nodes", await client.get(f"{API}/nodes"))
        assert sorted(n["name"] for n in nodes["nodes"]) == ["n1", "n2", "n3", "n4"]
        assert {n["state"] for n in nodes["nodes"]} == {"idle"}
        assert {n["cpus"] for n in nodes["nodes"]} == {2}

        parts = record("partitions", await client.get(f"{API}/partitions"))
        assert [p["name"] for p in parts["partitions"]] == ["debug"]


async def test_two_node_batch_job_runs_srun_steps(slurm_cluster: SlurmCluster) -> None:
    script = (
        "#!/bin/bash\n"
        'echo "nodes=$SLURM_JOB_NODELIST n=$SLURM_JOB_NUM_NODES"\n'
        "srun --ntasks-per-node=1 bash -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME\"'\n"
        "sleep 2\n"
    )
    async with slurm_cluster.client() as client:
        job_id = await submit(client, job_body(script, slurm_cluster, nodes=2), "job_submit")
        running = record("job_running", await wait_state(client, job_id, {"RUNNING"}))
        assert running["jobs"][0]["node_count"] == 2
        listed = record("jobs", await client.get(f"{API}/jobs"))
        assert job_id in [j["job_id"] for j in listed["jobs"]]
        nodes = record("nodes_busy", await client.get(f"{API}/nodes"))["nodes"]
        busy = {n["name"] for n in nodes if n["state"] != "idle"}
        assert len(busy) == 2 and {n["state"] for n in nodes if n["name"] in busy} <= {
            "allocated",
            "mixed",
        }
        done = record("job_completed", await wait_state(client, job_id, FINISHED))
        info = done["jobs"][0]
        assert (info["job_state"], info["exit_code"]) == ("COMPLETED", 0)
    out = (slurm_cluster.state / f"job-{job_id}.out").read_text()
    assert "n=2" in out
    tasks = sorted(ln.split() for ln in out.splitlines() if ln.startswith("task "))
    assert [t[1] for t in tasks] == ["0", "1"]  # one task per node, on two distinct nodes
    assert len({t[-1] for t in tasks}) == 2 and {t[-1] for t in tasks} <= {"n1", "n2", "n3", "n4"}


async def test_failing_job_exit_code_is_a_wait_status(slurm_cluster: SlurmCluster) -> None:
    async with slurm_cluster.client() as client:
        job_id = await submit(client, job_body("#!/bin/bash\nexit 3\n", slurm_cluster))
        info = record("job_failed", await wait_state(client, job_id, FINISHED))["jobs"][0]
    assert (info["job_state"], info["state_reason"]) == ("FAILED", "NonZeroExitCode")
    assert info["exit_code"] == 3 << 8
    assert os.waitstatus_to_exitcode(info["exit_code"]) == 3


async def test_held_job_pends_and_cancel_ends_running_job(slurm_cluster: SlurmCluster) -> None:
    async with slurm_cluster.client() as client:
        body = job_body("#!/bin/bash\ntrue\n", slurm_cluster, hold=True)
        held = await submit(client, body, "job_submit_held", errors=1)
        info = record("job_pending", await client.get(f"{API}/job/{held}"))["jobs"][0]
        assert info["job_state"] == "PENDING"
        await client.delete(f"{API}/job/{held}")

        job_id = await submit(client, job_body("#!/bin/bash\nsleep 600\n", slurm_cluster))
        await wait_state(client, job_id, {"RUNNING"})
        cancel = record("job_cancel", await client.delete(f"{API}/job/{job_id}"))
        assert cancel["errors"] == []
        info = record("job_cancelled", await wait_state(client, job_id, FINISHED))["jobs"][0]
        assert info["job_state"] == "CANCELLED"
        assert (await job(client, held))["job_state"] == "CANCELLED"


async def test_errors_of_bad_requests(slurm_cluster: SlurmCluster) -> None:
    async with slurm_cluster.client() as client:
        body = job_body("#!/bin/bash\ntrue\n", slurm_cluster)
        del body["job"]["environment"]
        resp = await client.post(f"{API}/job/submit", json=body)
        errors = record("job_submit_no_environment", resp, body)["errors"]
        assert resp.status_code == 400
        assert "environment must be set" in [e.get("error") for e in errors]

        # more nodes than the partition has: an error, yet the job exists and pends for ever
        body = job_body("#!/bin/bash\ntrue\n", slurm_cluster, nodes=5)
        big = await submit(client, body, "job_submit_too_many_nodes", errors=1)
        info = record("job_pending_partition_config", await client.get(f"{API}/job/{big}"))
        assert (info["jobs"][0]["job_state"], info["jobs"][0]["state_reason"]) == (
            "PENDING",
            "PartitionConfig",
        )
        await client.delete(f"{API}/job/{big}")

        resp = await client.get(f"{API}/job/999999")
        errors = record("job_unknown", resp)["errors"]
        assert resp.status_code == 500  # not 404: the adapter must read error 2017
        assert [e["error"] for e in errors] == ["Invalid job id specified"]
