"""Fleet truth on Slurm (issue 19 item 5), with `tp serve` on the real cluster of
tests/fixtures/slurm.py: a node drained in Slurm is never reserved for the next job (the
scheduler reads Slurm again before it reserves); a slurm pool whose partition does not exist
shows why in `GET /v1/fleet` and `tp fleet ls`, and admits nothing."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.test_slurm_backend import Factory, Setup, setup_for
from tests.fixtures.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
async def slurm(api_servers_factory: Factory, slurm_cluster: SlurmCluster, tmp_path: Path) -> Setup:
    return await setup_for(api_servers_factory, slurm_cluster, tmp_path)


def scontrol(cluster: SlurmCluster, *args: str) -> None:
    subprocess.run(["scontrol", *args], env=cluster.env(), check=True, capture_output=True)


@pytest.fixture
def drained(slurm_cluster: SlurmCluster) -> Iterator[Callable[[str], None]]:
    """Drain nodes in Slurm; every one is resumed afterwards (the cluster is the session's)."""
    names: list[str] = []

    def drain(name: str) -> None:
        names.append(name)
        scontrol(slurm_cluster, "update", f"nodename={name}", "state=drain", "reason=test")

    yield drain
    for name in names:
        scontrol(slurm_cluster, "update", f"nodename={name}", "state=resume")


async def _until(ok: Callable[[], object], what: str, within: float = 120) -> object:
    deadline = time.monotonic() + within
    while not (value := ok()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)
    return value


async def test_a_node_drained_in_slurm_is_not_reserved_for_the_next_job(
    slurm: Setup, drained: Callable[[str], None]
) -> None:
    await asyncio.to_thread(slurm.cluster.wait_idle)
    for name in ("n1", "n2", "n3"):  # right before the submission: no sync in between
        drained(name)
    job_id = slurm.submit("echo on a node that takes work", profile="debug/cpu:2")
    job = slurm.cli.wait_state(job_id, {"starting", "running", "succeeded", "failed"}, 120)
    [member] = job["attempts"][0]["members"]
    assert member["node"] == "n4", job  # the only node Slurm has not drained
    nodes = {
        n["name"]: n
        for p in slurm.api("GET", "/v1/fleet")["pools"]
        if p["name"] == "debug"
        for n in p["nodes"]
    }
    assert {nodes[n]["sched"] for n in ("n1", "n2", "n3")} == {"draining"}
    assert not any(nodes[n]["eligible"] for n in ("n1", "n2", "n3"))
    job = slurm.finished(job_id)
    assert job["state"] == "succeeded", (job["log"], job["reason"])


async def test_a_pool_without_its_partition_says_why_and_admits_nothing(slurm: Setup) -> None:
    slurm.api(
        "POST",
        "/v1/fleet/apply",
        {
            "pools": [
                {
                    "name": "bogus",
                    "backend": "slurm",
                    "cpus_per_node": 2,
                    "memory_mb_per_node": 2000,
                    "nodes": 1,
                }
            ]
        },
    )

    def bogus() -> dict[str, object] | None:
        pools = slurm.api("GET", "/v1/fleet")["pools"]
        found = next((p for p in pools if p["name"] == "bogus" and p["unavailable"]), None)
        return found

    pool = await _until(bogus, "pool bogus to be marked")  # within the capacity sync's period
    assert isinstance(pool, dict)
    assert "Slurm has no partition bogus (partitions: debug)" in pool["unavailable"]
    assert "TUNEPLANE_SLURM_PARTITIONS=bogus=PARTITION" in pool["unavailable"]
    [node] = pool["nodes"]
    assert (node["connectivity"], node["eligible"]) == ("disconnected", False)
    listed = slurm.cli("fleet", "ls").stdout
    assert "pool bogus takes no new work: Slurm has no partition bogus" in listed, listed

    job_id = slurm.submit("echo never", profile="bogus/cpu:1")
    why = await _until(
        lambda: (
            "Slurm has no partition bogus" in (out := slurm.cli("job", "why", job_id).stdout)
            and out
        ),
        "tp job why to name the missing partition",
    )
    assert "pool bogus takes no new work" in str(why)
    job = slurm.cli.status(job_id)
    assert job["state"] == "pending" and not job["attempts"], job
    slurm.cli("job", "stop", job_id)
