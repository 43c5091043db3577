"""The Slurm adapter's version layer and client on recorded slurmrestd answers: the v0.0.38 ones
recorded from Debian 12's Slurm 22.05 (tests/integration/test_slurm_rest.py), and v0.0.40,
v0.0.41, v0.0.42 built from Slurm's published OpenAPI descriptions of those versions (the
README in tests/fixtures/slurm_recorded/ says which file of which commit). The same client code
reads every version; only the dialect differs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.slurm.client import SlurmClient, SlurmEndpoint
from adapters.slurm.versions import JobRequest, choose, dialect, exit_from_wait_status
from domain.errors import InvalidInput, Unavailable

pytestmark = pytest.mark.unit

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_recorded"
NEWER = ["v0.0.40", "v0.0.41", "v0.0.42"]
ALL = ["v0.0.38", *NEWER]


def recording(version: str, name: str) -> dict[str, Any]:
    return dict(json.loads((RECORDED / version / f"{name}.json").read_text()))


def replaying(version: str, answers: dict[tuple[str, str], str]) -> SlurmClient:
    """A client whose slurmrestd answers ``(method, path)`` with the named recording, and
    records what was sent (``client.sent``)."""
    sent: list[tuple[str, str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        sent.append((request.method, request.url.path, body))
        name = answers.get((request.method, request.url.path))
        if name is None:
            return httpx.Response(404, text="not found")
        rec = recording(version, name)
        return httpx.Response(rec["status"], json=rec["body"])

    client = SlurmClient(SlurmEndpoint("http://slurm.example:6820", version=version))
    client._http = httpx.AsyncClient(
        transport=httpx.MockTransport(handler), base_url="http://slurm.example:6820"
    )
    client.sent = sent  # type: ignore[attr-defined]
    return client


def part(**kw: Any) -> JobRequest:
    base: dict[str, Any] = {
        "name": "tp-att-1",
        "comment": "tuneplane attempt=att-1",
        "nodes": 2,
        "cwd": "/shared/att-1",
        "stdout": "/shared/att-1/batch.log",
        "environment": {"PATH": "/usr/bin:/bin"},
        "partition": "debug",
        "memory_mb_per_node": 512,
    }
    return JobRequest(**(base | kw))


@pytest.mark.parametrize("version", ALL)
async def test_submit_and_a_job_through_its_life(version: str) -> None:
    p = f"/slurm/{version}"
    client = replaying(version, {("POST", f"{p}/job/submit"): "job_submit"})
    result = await client.submit("#!/bin/bash\nsrun true\n", [part()])
    assert result.job_id == recording(version, "job_submit")["body"]["job_id"]
    assert result.errors == ()
    [(_, _, body)] = client.sent  # type: ignore[attr-defined]
    job = body["job"]
    if version == "v0.0.38":  # the script beside the job, environment an object
        assert body["script"].startswith("#!/bin/bash") and job["environment"] == {
            "PATH": "/usr/bin:/bin"
        }
        assert job["nodes"] == 2 and job["memory_per_node"] == 512
    else:  # in the job, a list of NAME=value, numbers as {set, number}
        assert "script" not in body and job["script"].startswith("#!/bin/bash")
        assert job["environment"] == ["PATH=/usr/bin:/bin"]
        assert job["nodes"] == "2" and job["memory_per_node"] == {"set": True, "number": 512}

    for name, state, code, ended in [
        ("job_running", "RUNNING", None, False),
        ("job_completed", "COMPLETED", 0, True),
        ("job_failed", "FAILED", 3, True),  # v0.0.38: wait status 768
        ("job_cancelled", "CANCELLED", 128 + 15, True),  # killed by SIGTERM
    ]:
        rec = recording(version, name)
        client = replaying(version, {("GET", rec["request"]["path"]): name})
        job_id = int(rec["request"]["path"].rsplit("/", 1)[1])
        [got] = await client.job(job_id) or []
        assert (got.state, got.exit_code, got.allocation_ended) == (state, code, ended), name


@pytest.mark.parametrize("version", ALL)
async def test_a_held_job_exists_despite_its_error(version: str) -> None:
    client = replaying(version, {("POST", f"/slurm/{version}/job/submit"): "job_submit_held"})
    result = await client.submit("#!/bin/bash\n", [part()])
    assert result.job_id is not None
    assert [e.code for e in result.errors] == [2042]


@pytest.mark.parametrize("version", ALL)
async def test_an_unknown_job_is_none_not_an_outage(version: str) -> None:
    client = replaying(version, {("GET", f"/slurm/{version}/job/999999"): "job_unknown"})
    assert await client.job(999999) is None  # HTTP 500 with error 2017


@pytest.mark.parametrize("version", ALL)
async def test_nodes_and_partitions(version: str) -> None:
    p = f"/slurm/{version}"
    client = replaying(
        version, {("GET", f"{p}/nodes"): "nodes", ("GET", f"{p}/partitions"): "partitions"}
    )
    nodes = {n.name: n for n in await client.nodes()}
    assert sorted(nodes) == ["n1", "n2", "n3", "n4"]
    assert all(
        n.cpus == 2 and n.memory_mb == 2000 and n.partitions == ("debug",) for n in nodes.values()
    )
    [partition] = await client.partitions()
    assert (partition.name, partition.nodes, partition.total_nodes, partition.total_cpus) == (
        "debug",
        "n[1-4]",
        4,
        8,
    )
    if version != "v0.0.38":  # the newer recordings carry the states a sync must map
        assert (nodes["n1"].state, nodes["n2"].state) == ("mixed", "allocated")
        assert (nodes["n3"].state, nodes["n3"].flags) == ("idle", frozenset({"drain"}))
        assert (nodes["n4"].state, nodes["n4"].flags) == ("down", frozenset({"not_responding"}))


@pytest.mark.parametrize("version", NEWER)
async def test_newer_versions_completing_heterogeneous_and_refused(version: str) -> None:
    p = f"/slurm/{version}"
    client = replaying(
        version,
        {
            ("GET", f"{p}/job/7"): "job_completing",
            ("GET", f"{p}/job/11"): "job_het_running",
            ("POST", f"{p}/job/submit"): "job_submit_refused",
        },
    )
    [completing] = await client.job(7) or []
    assert completing.state == "COMPLETED" and completing.flags == {"COMPLETING"}
    assert not completing.allocation_ended  # a node still cleans up: the reservation is held
    het = await client.job(11) or []
    assert [(j.het_job_id, j.het_job_offset, j.nodes) for j in het] == [
        (11, 0, "n1"),
        (11, 1, "n3"),
    ]
    refused = await client.submit("#!/bin/bash\n", [part(partition="nope")])
    assert refused.job_id is None and [e.code for e in refused.errors] == [2000]


@pytest.mark.parametrize("version", ALL)
async def test_list_of_jobs_finds_ours_by_name_and_comment(version: str) -> None:
    client = replaying(version, {("GET", f"/slurm/{version}/jobs"): "jobs"})
    jobs = await client.jobs()
    assert jobs and all(j.job_id > 0 for j in jobs)


def test_heterogeneous_submission_shapes() -> None:
    two = [part(nodes=1, partition="cpu"), part(nodes=2, partition="gpu", gpus_per_node=8)]
    old = dialect("v0.0.38").submit_body("S", two)
    assert old["script"] == "S" and [j["partition"] for j in old["jobs"]] == ["cpu", "gpu"]
    assert old["jobs"][1]["gres"] == "gpu:8"
    new = dialect("v0.0.41").submit_body("S", two)
    assert new["jobs"][0]["script"] == "S" and "script" not in new["jobs"][1]
    assert new["jobs"][1]["tres_per_node"] == "gres/gpu:8"


def test_discovery_and_wait_statuses() -> None:
    assert choose(["/slurm/v0.0.36/ping", "/slurm/v0.0.38/ping"]) == "v0.0.38"
    assert choose(["/slurm/v0.0.40/ping", "/slurm/v0.0.42/ping", "/slurmdb/v0.0.42/jobs"]) == (
        "v0.0.42"
    )
    assert choose(["/slurm/v0.0.39/ping"]) is None
    assert [exit_from_wait_status(s) for s in (0, 768, 15, 9, 0x8B)] == [0, 3, 143, 137, 139]
    with pytest.raises(ValueError, match="unsupported Slurm REST API version"):
        dialect("v0.0.39")
    with pytest.raises(InvalidInput, match="neither unix:PATH nor http"):
        SlurmEndpoint("slurm:6820").check()


async def test_discovery_from_openapi_v3_and_an_outage() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.41/ping/": {}}})
        return httpx.Response(200, json=recording("v0.0.41", "nodes")["body"])

    client = SlurmClient(SlurmEndpoint("http://slurm.example:6820", user="u", token="t"))
    client._http = httpx.AsyncClient(
        transport=httpx.MockTransport(handler),
        base_url="http://slurm.example:6820",
        headers=client._http.headers,
    )
    assert (await client.dialect()).version == "v0.0.41"
    assert client._http.headers["X-SLURM-USER-TOKEN"] == "t"
    assert client._http.headers["X-SLURM-USER-NAME"] == "u"
    assert len(await client.nodes()) == 4

    down = SlurmClient(SlurmEndpoint("unix:/nonexistent/slurmrestd.sock", version="v0.0.38"))
    with pytest.raises(Unavailable, match="cannot be reached"):
        await down.ping()


async def test_accounting_of_a_forgotten_job(tmp_path: Path) -> None:
    """Recorded from slurmdbd behind Debian 12's slurmrestd (dbv0.0.38): a job that ran
    ``exit 3`` is ``FAILED``, yet its ``exit_code`` says SUCCESS 0 (22.05 decodes it wrongly;
    sacct shows 3:0). The backend takes the member's own exit file, else never "succeeded"."""
    p = "/slurmdb/v0.0.38/job"
    client = replaying(
        "v0.0.38", {("GET", f"{p}/1"): "db_job_failed", ("GET", f"{p}/999999"): "db_job_unknown"}
    )
    [job] = await client.accounted(1) or []
    assert (job.job_id, job.state, job.exit_code, job.allocation_ended) == (1, "FAILED", 0, True)
    assert job.cancelled_by == ""  # kill_request_user: null (nobody cancelled it)
    assert await client.accounted(999999) is None  # "Nothing found": no record

    from adapters.slurm.attempt_dirs import Handle
    from adapters.slurm.backend import SlurmBackend

    backend = SlurmBackend(client, tmp_path)
    (tmp_path / "att-1").mkdir()
    obs = backend._observation(Handle(1, 0, "att-1"), [job], "Slurm accounting")
    assert (obs.status, obs.exit_code) == ("exited", -1)
    assert "Slurm accounting reports job 1 FAILED" in obs.reason
    (tmp_path / "att-1" / "member-0.exit").write_text("3\n")
    obs = backend._observation(Handle(1, 0, "att-1"), [job], "Slurm accounting")
    assert (obs.status, obs.exit_code) == ("exited", 3)
