"""`tp fleet check` with real daemons, containers and TLS on loopback: a pool whose nodes share
a directory passes; a node that sees another directory, and a node its peers cannot reach
(it advertises an unroutable address), are marked failed with the reason, the others pass,
and a gang then avoids the failed nodes."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.e2e.test_node_backend import Factory, cli_for, submit

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_a_pool_check_marks_the_nodes_that_fail_it(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    shared, other = tmp_path / "shared", tmp_path / "elsewhere"
    shared.mkdir()
    other.mkdir()
    cluster = await node_cluster_factory(0)
    for name in ("n1", "n2", "n3"):
        cluster.start_daemon(name, extra=["--shared-dir", str(shared)])
    await asyncio.to_thread(cluster.wait_connected, ["n1", "n2", "n3"])
    cli = await cli_for(cluster, tmp_path)

    first = cli("fleet", "check", "nodes", "--timeout", "10", "--json")
    result = json.loads(first.stdout[first.stdout.index("{") :])
    assert result["ok"] is True, result
    assert [r["node"] for r in result["results"]] == ["n1", "n2", "n3"]
    assert all("2 of 2 peers reached" in r["detail"] for r in result["results"])
    assert all("shared storage verified" in r["detail"] for r in result["results"][1:])

    cluster.kill_daemon("n3", signal.SIGTERM)  # n3 now sees another directory
    cluster.start_daemon("n3", extra=["--shared-dir", str(other)])
    cluster.start_daemon("n4", extra=["--shared-dir", str(shared)], address="192.0.2.1")
    await asyncio.to_thread(cluster.wait_connected, ["n3", "n4"])
    second = cli("fleet", "check", "nodes", "--timeout", "6", ok=False)
    assert second.returncode == 1, second.stdout + second.stderr
    by_node = {line.split()[0]: line for line in second.stdout.splitlines() if line.startswith("n")}
    assert "ok" in by_node["n1"] and "ok" in by_node["n2"], second.stdout
    assert "FAILED" in by_node["n3"] and "storage" in second.stdout, second.stdout
    assert "FAILED" in by_node["n4"] and "unreachable from" in second.stdout, second.stdout

    nodes = await asyncio.to_thread(cluster.nodes)
    assert {n: nodes[n]["validation"] for n in nodes if n != "local"} == {
        "n1": "passed",
        "n2": "passed",
        "n3": "failed",
        "n4": "failed",
    }
    assert not nodes["n3"]["eligible"] and not nodes["n4"]["eligible"]
    assert "storage" in nodes["n3"]["validation_reason"], nodes["n3"]
    assert "unreachable from" in nodes["n4"]["validation_reason"], nodes["n4"]
    assert nodes["n1"]["validation_reason"] == "" and nodes["n1"]["validated_at"]
    assert nodes["n3"]["validated_at"] == nodes["n4"]["validated_at"]  # the check's end
    last = cli("fleet", "check", "nodes", "--last", ok=False)  # shows it again, same verdict
    assert last.returncode == 1 and "pool nodes: FAILED at" in last.stdout
    listing = cli("fleet", "ls").stdout
    assert "failed" in listing and "passed" in listing
    assert "pool nodes: check chk-" in listing and "FAILED at" in listing, listing
    assert listing.rstrip().endswith("n3, n4"), listing  # the nodes that failed it

    job_id = submit(cli, "echo on $TUNEPLANE_PEERS", "nodes/cpu:1")  # a gang of two nodes
    job = await asyncio.to_thread(cli.wait_state, job_id, {"succeeded", "failed"}, 90)
    assert job["state"] == "succeeded", job
    assert {m["node"] for m in job["attempts"][0]["members"]} == {"n1", "n2"}
