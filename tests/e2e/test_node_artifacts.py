"""Artifacts of node-backend jobs: the files stay on the nodes, the manifest is reported with each
member's exit, `tp artifacts verify` hashes them again there, and `tp artifacts get` has the
node send one through the control plane (docs/capsule.md, Artifacts)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.test_node_backend import cli_for, submit
from tests.fixtures.nodes import NodeCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Factory = Callable[..., Awaitable[NodeCluster]]
WRITE = (
    'echo "rank $RANK" > "$TUNEPLANE_OUTPUT_DIR/report.txt" && '
    'mkdir -p "$TUNEPLANE_OUTPUT_DIR/ckpt" && '
    'head -c 4096 /dev/urandom > "$TUNEPLANE_OUTPUT_DIR/ckpt/weights.bin"'
)


async def test_node_outputs_are_recorded_verified_on_their_node_and_tampering_is_found(
    node_cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await node_cluster_factory(2)
    cli = await cli_for(cluster, tmp_path)
    job_id = submit(cli, WRITE, "nodes/cpu:1")  # a gang of two whole nodes
    job = cli.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    why = [(a.get("reason"), [(m["index"], m.get("state"), m.get("reason")) for m in a["members"]])
           for a in job["attempts"]]  # fmt: skip
    assert job["state"] == "succeeded", (job.get("reason"), job.get("exit_code"), why)
    [attempt] = job["attempts"]
    nodes = {m["index"]: m["node"] for m in attempt["members"]}
    assert len(nodes) == 2

    # recorded from the nodes' reports, each with the node that holds the files
    found = json.loads(cli("artifacts", "ls", job_id, "--json").stdout)["members"]
    assert {m["member"]: m["node"] for m in found} == nodes
    for m in found:
        assert sorted(f["path"] for f in m["files"]) == ["ckpt/weights.bin", "report.txt"]
        [report] = [f for f in m["files"] if f["path"] == "report.txt"]
        assert report["size"] == len(f"rank {m['member']}\n")

    # hashed again on the nodes: everything matches
    out = cli("artifacts", "verify", job_id).stdout
    assert out.count("2 files match manifest") == 2, out
    assert f"(on node {nodes[0]})" in out and f"(on node {nodes[1]})" in out

    # a file kept on a node is downloaded through the control plane, byte for byte
    def kept(member: int, path: str) -> bytes:
        root: Path = cluster.daemons[nodes[member]].state_dir / "outputs" / job_id / attempt["id"]
        return (root / str(member) / path).read_bytes()

    first = tmp_path / "w0.bin"
    cli("artifacts", "get", job_id, "ckpt/weights.bin", "--member", "0", "-o", str(first))
    assert first.read_bytes() == kept(0, "ckpt/weights.bin")
    got = cli("artifacts", "get", job_id, "report.txt", "--member", "1", "-o", "-").stdout
    assert got == "rank 1\n"

    # a byte changed and a file added on member 1's node are reported file by file
    daemon = cluster.daemons[nodes[1]]
    member_dir = daemon.state_dir / "outputs" / job_id / attempt["id"] / "1"
    (member_dir / "ckpt" / "weights.bin").write_bytes(b"x" * 4096)
    (member_dir / "extra.txt").write_text("not from the job\n")
    proc = cli("artifacts", "verify", job_id, ok=False)
    assert proc.returncode == 1, proc
    checked = json.loads(cli("artifacts", "verify", job_id, "--json", ok=False).stdout)
    by_member = {m["member"]: m for m in checked["members"]}
    assert by_member[0]["ok"] and not by_member[0]["differences"]
    problems = {(d["path"], d["problem"]) for d in by_member[1]["differences"]}
    assert problems == {("ckpt/weights.bin", "changed"), ("extra.txt", "added")}
    # and the changed file is not handed out as the recorded one
    changed = tmp_path / "w1.bin"
    args = ("artifacts", "get", job_id, "ckpt/weights.bin", "--member", "1", "-o", str(changed))
    proc = cli(*args, ok=False)
    assert proc.returncode == 4 and "not the one recorded" in proc.stderr, proc
    assert not changed.exists()

    # a node that is away cannot vouch for its files: said so, never "verified"
    cluster.kill_daemon(nodes[0])
    deadline = time.monotonic() + 30
    while cluster.nodes()[nodes[0]]["connectivity"] == "connected":
        assert time.monotonic() < deadline, "the killed daemon still shows connected"
        await asyncio.sleep(0.2)
    proc = cli("artifacts", "verify", job_id, "--wait", "2", ok=False)
    assert proc.returncode == 1, proc  # member 1 still differs
    checked = json.loads(cli("artifacts", "verify", job_id, "--json", ok=False).stdout)
    unchecked = {m["member"]: m["unchecked"] for m in checked["members"]}
    assert nodes[0] in unchecked[0] and not checked["ok"]
    assert unchecked[1] == ""

    # a file fetched before is still served, its node away; another is unavailable, not missing
    again = tmp_path / "again.bin"
    cli("artifacts", "get", job_id, "ckpt/weights.bin", "--member", "0", "-o", str(again))
    assert again.read_bytes() == first.read_bytes()
    report = ("artifacts", "get", job_id, "report.txt", "--member", "0", "--wait", "2", "-o", "-")
    proc = cli(*report, ok=False)
    assert proc.returncode == 6 and f"node {nodes[0]} is" in proc.stderr, proc
