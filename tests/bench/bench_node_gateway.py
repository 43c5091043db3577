"""One node control gateway holding many node streams (not part of the suite).

A real `tp serve` and `tp gateway node` (TLS, dev CA, PostgreSQL) on loopback; this process
plays the nodes: each enrolls with its own join token, opens its own TLS connection and
``Connect`` stream with its credential, says Hello, then sends a heartbeat every
``TUNEPLANE_HEARTBEAT_SECONDS`` (5 s; first beats spread over one interval) and times each
answer. Measured over a steady window, twice in the same run: with a few nodes connected
(the baseline) and with all of them: the gateway process's CPU (from /proc, user + system),
its resident memory, and the heartbeat round trip (p50, p99) as the nodes see it.

Run: ``.venv/bin/pytest tests/bench/bench_node_gateway.py -m bench -s`` with the test engine in
``DOCKER_HOST`` as for the suite (``BENCH_NODES``, default 1000; ``BENCH_BASE_NODES``, 10;
``BENCH_SECONDS``, 60).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.exceptions import StreamTerminatedError

from adapters.grpc import node_codec as codec
from adapters.grpc.codec_pieces import capacity_to
from adapters.tls import client_context
from domain.node_messages import Heartbeat, HeartbeatAck, Hello, Welcome
from domain.node_protocol import NodeCapacity
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlStub
from tests.fixtures.nodes import NODE_CPUS, NODE_MEMORY_MB, NodeCluster

pytestmark = pytest.mark.bench

NODES = int(os.environ.get("BENCH_NODES", "1000"))
BASE = int(os.environ.get("BENCH_BASE_NODES", "10"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "60"))
HEARTBEAT = 5
CAP = NodeCapacity(0, None, NODE_CPUS, NODE_MEMORY_MB)
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class SimNode:
    def __init__(self, name: str, cluster: NodeCluster) -> None:
        self.name = name
        self.cluster = cluster
        self.credential = ""
        self.rtts: list[float] = []
        self.sent: deque[float] = deque()
        self.channel: Channel | None = None
        self.task: asyncio.Task[None] | None = None
        self.welcomed = asyncio.Event()

    def new_channel(self) -> Channel:
        ssl = client_context(self.cluster.ca)
        return Channel("127.0.0.1", self.cluster.gateway_port, ssl=ssl)

    async def enroll(self, token: str) -> None:
        channel = self.new_channel()
        try:
            request = pb.EnrollRequest(
                join_token=token,
                node_name=self.name,
                capacity=capacity_to(CAP),
                address="127.0.0.1",
            )
            reply = await NodeControlStub(channel).Enroll(request, timeout=60)
        finally:
            channel.close()
        self.credential = reply.credential

    async def run(self, delay: float) -> None:
        self.channel = self.new_channel()
        metadata = {"authorization": f"Bearer {self.credential}"}
        async with NodeControlStub(self.channel).Connect.open(metadata=metadata) as stream:
            await stream.send_message(
                codec.node_message_to(1, Hello(self.name, CAP, "127.0.0.1", "bench", 0, ()))
            )
            reader = asyncio.create_task(self._read(stream))
            await self.welcomed.wait()
            await asyncio.sleep(delay)
            seq = 1
            try:
                while True:
                    seq += 1
                    self.sent.append(time.perf_counter())
                    now_ms = int(time.time() * 1000)
                    await stream.send_message(codec.node_message_to(seq, Heartbeat(now_ms)))
                    await asyncio.sleep(HEARTBEAT)
            finally:
                reader.cancel()

    async def _read(self, stream: Any) -> None:
        with contextlib.suppress(StreamTerminatedError):
            await self._receive(stream)

    async def _receive(self, stream: Any) -> None:
        while (message := await stream.recv_message()) is not None:
            _, body, _ = codec.gateway_message_from(message)
            if isinstance(body, Welcome):
                self.welcomed.set()
            elif isinstance(body, HeartbeatAck) and self.sent:
                self.rtts.append(time.perf_counter() - self.sent.popleft())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.channel is not None:
            self.channel.close()


async def connect(nodes: list[SimNode]) -> None:
    for n in nodes:
        n.task = asyncio.create_task(n.run(delay=HEARTBEAT * (hash(n.name) % 1000) / 1000))
    pending = [asyncio.create_task(n.welcomed.wait()) for n in nodes]
    _, late = await asyncio.wait(pending, timeout=300)
    if late:
        failed = [n for n in nodes if n.task is not None and n.task.done()]
        why = failed[0].task.exception() if failed and failed[0].task else "timeout"
        raise AssertionError(f"{len(late)} of {len(nodes)} nodes were not welcomed: {why}")


async def measure(pid: int, nodes: list[SimNode], seconds: float) -> dict[str, float]:
    await asyncio.sleep(HEARTBEAT * 2)  # every node beats a few times first
    for n in nodes:
        n.rtts.clear()
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    rtts = sorted(r for n in nodes for r in n.rtts)
    return {
        "nodes": len(nodes),
        "beats_per_s": len(rtts) / (t1 - t0),
        "cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss_mib": rss_mib(pid),
        "p50_ms": 1000 * statistics.median(rtts),
        "p99_ms": 1000 * rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))],
        "beats": len(rtts),
    }


async def test_gateway_with_many_node_streams(
    node_cluster_factory: Callable[..., Awaitable[NodeCluster]],
) -> None:
    cluster = await node_cluster_factory(0, TUNEPLANE_HEARTBEAT_SECONDS=str(HEARTBEAT))
    assert cluster.gateway is not None
    pid = cluster.gateway.pid
    nodes = [SimNode(f"sim-{i:04d}", cluster) for i in range(NODES)]
    started = time.monotonic()
    tokens = await asyncio.gather(
        *(asyncio.to_thread(cluster.join_token, n.name) for n in nodes[:1])
    )  # warm the API
    limit = asyncio.Semaphore(16)

    async def enroll(n: SimNode) -> None:
        async with limit:
            token = await asyncio.to_thread(cluster.join_token, n.name)
            await n.enroll(token)

    del tokens
    await asyncio.gather(*(enroll(n) for n in nodes))
    enrolled = time.monotonic() - started
    try:
        await connect(nodes[:BASE])
        base = await measure(pid, nodes[:BASE], SECONDS / 2)
        started = time.monotonic()
        await connect(nodes[BASE:])
        connected = time.monotonic() - started
        full = await measure(pid, nodes, SECONDS)
    finally:
        await asyncio.gather(*(n.stop() for n in nodes))
    print(f"\nenrolled {NODES} nodes in {enrolled:.1f} s; {NODES - BASE} more connected in "
          f"{connected:.1f} s; heartbeat every {HEARTBEAT} s")  # fmt: skip
    print(f"{'':<24}{'baseline':>12}{'all':>12}{'ratio':>8}")
    for key in ("nodes", "beats_per_s", "cpu_pct", "rss_mib", "p50_ms", "p99_ms"):
        ratio = full[key] / base[key] if base[key] else float("nan")
        print(f"{key:<24}{base[key]:>12.2f}{full[key]:>12.2f}{ratio:>8.2f}")
    assert full["beats"] > 0.9 * NODES * SECONDS / HEARTBEAT, full  # nearly every beat answered
