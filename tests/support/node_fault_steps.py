"""The steps of the node-fault tests (tests/e2e/test_node_faults.py,
test_node_credentials.py) on a real node cluster: waits on conditions (a node's connectivity,
its members' states, the rows settled), restarts, logs read from an offset, the rows a node's
messages could change, and a member told over the network when its work is done."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg

from tests.fixtures.nodes import NodeCluster
from tests.support.db import plain_dsn

STATE_TABLES = (
    "jobs",
    "attempts",
    "members",
    "reservations",
    "launches",
    "member_launches",
    "member_logs",
    "nodes",
)


async def connectivity(cluster: NodeCluster, node: str, want: str, within: float = 60) -> None:
    """Until the control plane shows ``node`` ``want`` (connected, disconnected). The default
    bound outlasts the control plane's own limit for a silent node (``FLOOR``), which marks it
    disconnected where its gateway missed the end of its stream."""
    deadline = time.monotonic() + within
    while (await asyncio.to_thread(cluster.nodes))[node]["connectivity"] != want:
        assert time.monotonic() < deadline, f"node {node} never became {want}"
        await asyncio.sleep(0.2)


async def restart(
    cluster: NodeCluster, node: str, port: int | None = None, env: dict[str, str] | None = None
) -> None:
    """Stop ``node``'s daemon (SIGTERM), and once its gateway closed its session start it again
    (through ``port``, else straight to the gateway; ``env`` over the cluster's settings) and
    wait until it is connected."""
    cluster.kill_daemon(node, signal.SIGTERM)
    await connectivity(cluster, node, "disconnected")
    cluster.start_daemon(node, port=port, env=env)
    await asyncio.to_thread(cluster.wait_connected, [node])


def tail(path: Path, since: int) -> str:
    """What was written to the log ``path`` from byte ``since`` on (a shared cluster's logs
    hold the earlier tests' lines too)."""
    with path.open("rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def live_reservations(cluster: NodeCluster, attempt_id: str) -> int:
    """Whether the attempt's envelope is still reserved (1) or released (0)."""
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM reservations WHERE attempt_id = $1", attempt_id
            )
        )
    finally:
        await conn.close()


def listeners(ports: tuple[int, int]) -> str:
    """A gang command whose member of rank r waits until told on the host's port ``ports[r]``
    (``tell``), then ends by itself, 0: the test decides when the work is done instead of
    sleeping for a guess of how long its faults take."""
    return (
        f'if [ "$RANK" = 0 ]; then nc -l -p {ports[0]}; else nc -l -p {ports[1]}; fi; '
        "echo rank $RANK done"
    )


async def snapshot(cluster: NodeCluster) -> dict[str, list[Any]]:
    """Every row of the tables a node's messages could change."""
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        return {
            t: [dict(r) for r in await conn.fetch(f"SELECT * FROM {t} ORDER BY 1")]
            for t in STATE_TABLES
        }
    finally:
        await conn.close()


async def settled(cluster: NodeCluster, within: float = 30) -> dict[str, list[Any]]:
    """A snapshot once two taken half a second apart agree: what the control plane does after
    a Hello (reconciling, recording reasons) has been written."""
    deadline = time.monotonic() + within
    last = await snapshot(cluster)
    while True:
        await asyncio.sleep(0.5)
        now = await snapshot(cluster)
        if now == last:
            return now
        assert time.monotonic() < deadline, "the rows kept changing"
        last = now


async def wait_members(
    cluster: NodeCluster, job_id: str, want: dict[str, str] | str, within: float = 60
) -> dict[str, Any]:
    """Until the job's members (by node) are in the given states."""
    deadline = time.monotonic() + within
    while True:
        job = await asyncio.to_thread(cluster.api, "GET", f"/v1/jobs/{job_id}")
        members = job["attempts"][-1]["members"] if job["attempts"] else []
        by_node = {m["node"]: m["state"] for m in members}
        expected = want if isinstance(want, dict) else dict.fromkeys(by_node, want)
        if members and all(by_node.get(n) == s for n, s in expected.items()):
            return job  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"members of {job_id} are {by_node}, not {expected}: {job}")
        await asyncio.sleep(0.3)


async def phases(cluster: NodeCluster, attempt_id: str) -> dict[int, tuple[str, bool]]:
    """Member index → (phase its node last reported, stop requested) in the launch ledger."""
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        rows = await conn.fetch(
            "SELECT idx, phase, stop_requested_at FROM member_launches WHERE attempt_id = $1",
            attempt_id,
        )
    finally:
        await conn.close()
    return {r["idx"]: (r["phase"], r["stop_requested_at"] is not None) for r in rows}


async def tell(port: int, line: bytes, within: float = 60) -> None:
    """Connect to a member listening on the host's network and send it ``line``."""
    deadline = time.monotonic() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            await asyncio.sleep(0.2)
            continue
        writer.write(line)
        await writer.drain()
        writer.close()
        return


async def installation_of(cluster: NodeCluster) -> str:
    """The control plane's installation id, as its gateway names it in a Welcome."""
    conn = await asyncpg.connect(plain_dsn(cluster.servers.env["TUNEPLANE_DATABASE_URL"]))
    try:
        return str(
            await conn.fetchval("SELECT id FROM installation ORDER BY created_at, id LIMIT 1")
        )
    finally:
        await conn.close()
