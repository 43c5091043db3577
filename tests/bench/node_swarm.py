"""A load generator process for bench_node_gateway.py: it plays a share of the simulated nodes.

One Python process cannot play 10,000 TLS streams and 2,000 heartbeats a second on top of the
gateway on two cores, so the benchmark starts several of these (``multiprocessing``, spawned)
and drives them over a pipe; each runs its own event loop. Each simulated node does what a
daemon does on the wire: enrolls with its own join token (made through the HTTP API), opens its
own TLS connection and ``Connect`` stream with its credential and the daemon-instance header,
says Hello, sends a heartbeat every interval and times each answer; when its stream ends (its
gateway died) it connects again after a short random pause, as the daemon's link does.

Each process also samples its own event loop's lag (a 20 ms sleep's overshoot) and its garbage
collector's pauses, so the benchmark can tell the load generator's lateness from the gateway's.

Commands (a tuple, answered with one object): ("enroll", names, concurrency),
("connect", names), ("clear",), ("collect",), ("lag",), ("welcomed", [since]), ("stop",):
"welcomed" counts the nodes welcomed, those that reconnected, and those whose heartbeat was
answered after ``since`` (wall time).
"""

from __future__ import annotations

import asyncio
import gc
import random
import resource
import secrets
import ssl
import time
from collections import deque
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from grpclib.client import Channel

from adapters.grpc import node_codec as codec
from adapters.grpc.codec_pieces import capacity_to
from adapters.tls import client_context
from domain.node_messages import Heartbeat, HeartbeatAck, Hello, Welcome
from domain.node_protocol import NodeCapacity
from entrypoints.gc_pauses import keep_pauses_short, pace_collections
from entrypoints.process import run_server
from proto import node_control_pb2 as pb
from proto.node_control_grpc import NodeControlStub

NODE_CPUS = 0.5
NODE_MEMORY_MB = 256
CAP = NodeCapacity(0, None, NODE_CPUS, NODE_MEMORY_MB)


class SimNode:
    def __init__(self, name: str, swarm: Swarm) -> None:
        self.name = name
        self.swarm = swarm
        self.instance = secrets.token_hex(8)  # one daemon process: its reconnections are its own
        self.credential = ""
        self.rtts: list[float] = []
        self.sent: deque[float] = deque()
        self.channel: Channel | None = None
        self.task: asyncio.Task[None] | None = None
        self.welcomed = asyncio.Event()
        self.sessions = 0  # streams welcomed so far (>1: it reconnected)
        self.acked_at = 0.0  # wall time of the last heartbeat answered (any of its streams)
        self.holding = False  # one of the swarm's connecting slots

    def new_channel(self) -> Channel:
        return Channel("127.0.0.1", self.swarm.port, ssl=self.swarm.ssl)

    async def enroll(self, token: str) -> None:
        channel = self.new_channel()
        try:
            request = pb.EnrollRequest(
                join_token=token,
                node_name=self.name,
                capacity=capacity_to(CAP),
                address="127.0.0.1",
            )
            reply = await NodeControlStub(channel).Enroll(request, timeout=120)
        finally:
            channel.close()
        self.credential = reply.credential

    async def run(self, delay: float) -> None:
        """Keep a control stream open, connecting again when it ends (a gateway died)."""
        while True:
            await self.swarm.connecting.acquire()
            self.holding = True
            try:
                await self._stream(delay)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.swarm.errors[type(exc).__name__] = (
                    self.swarm.errors.get(type(exc).__name__, 0) + 1
                )
            finally:
                self._release()
            self.welcomed.clear()
            self.sent.clear()
            if self.channel is not None:
                self.channel.close()
            await asyncio.sleep(random.uniform(0.1, 1.0))  # the daemon's reconnect pause
            delay = random.uniform(0, self.swarm.heartbeat)

    async def _stream(self, delay: float) -> None:
        self.channel = self.new_channel()
        metadata = {
            "authorization": f"Bearer {self.credential}",
            codec.INSTANCE_HEADER: self.instance,
        }
        async with NodeControlStub(self.channel).Connect.open(metadata=metadata) as stream:
            await stream.send_message(
                codec.node_message_to(1, Hello(self.name, CAP, "127.0.0.1", "bench", 0, ()))
            )
            beats: asyncio.Task[None] | None = None
            try:
                while (message := await stream.recv_message()) is not None:
                    _, body, _ = codec.gateway_message_from(message)
                    if isinstance(body, HeartbeatAck):
                        self.acked_at = time.time()
                        if self.sent:
                            self.rtts.append(time.perf_counter() - self.sent.popleft())
                    elif isinstance(body, Welcome):
                        self._release()
                        self.sessions += 1
                        self.welcomed.set()
                        beats = asyncio.create_task(self._beat(stream, delay))
            finally:
                if beats is not None:
                    beats.cancel()

    def _release(self) -> None:
        if self.holding:
            self.holding = False
            self.swarm.connecting.release()

    async def _beat(self, stream: Any, delay: float) -> None:
        await asyncio.sleep(delay)
        seq = 1
        while True:
            seq += 1
            sent = time.perf_counter()
            self.sent.append(sent)
            now_ms = int(time.time() * 1000)
            await stream.send_message(codec.node_message_to(seq, Heartbeat(now_ms)))
            self.swarm.writes.append(time.perf_counter() - sent)  # the load generator's part
            await asyncio.sleep(self.swarm.heartbeat)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.channel is not None:
            self.channel.close()


class Swarm:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.port: int = cfg["port"]
        self.heartbeat: float = cfg["heartbeat"]
        self.ssl: ssl.SSLContext = client_context(Path(cfg["ca"]))  # one, as one daemon has
        self.api: str = cfg["api"]
        self.headers: dict[str, str] = cfg["headers"]
        self.pool: str = cfg["pool"]
        self.nodes: dict[str, SimNode] = {}
        self.connect_seconds: float = cfg.get("connect_seconds", 300)
        self.errors: dict[str, int] = {}  # why streams ended, by exception type
        # streams being opened at once: unpaced, thousands of TLS handshakes starve this
        # process's loop and the heartbeats of the streams already open (their gateway then
        # cuts them as silent: a load generator artefact, real nodes have a CPU each)
        self.connecting = asyncio.Semaphore(cfg.get("connecting", 32))
        self.lags: list[float] = []  # this process's loop lag samples, since "clear"
        self.gc_pauses: list[tuple[int, float]] = []  # its collections (generation, seconds)
        self.writes: list[float] = []  # a heartbeat's send_message call: encode and write
        self._gc_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self._gc_start))

    async def sample_lag(self, every: float = 0.02) -> None:
        """How late this process's loop wakes a sleeper: what it adds to every round trip."""
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(every)
            self.lags.append(time.perf_counter() - t0 - every)

    def lag(self) -> dict[str, Any]:
        """This process's loop lag, collections (by generation) and heartbeat writes since
        "clear": exact samples, not buckets."""
        pauses: dict[int, list[float]] = {}
        for generation, pause in self.gc_pauses:
            pauses.setdefault(generation, []).append(pause)
        return {
            "lag": self.lags,
            "writes": self.writes,
            "gc": pauses,
        }

    async def enroll(self, names: list[str], concurrency: int) -> dict[str, list[float]]:
        """Each node: a join token through the API, then Enroll on its own TLS connection.
        Returns each step's seconds, per node."""
        limit = asyncio.Semaphore(concurrency)
        times: dict[str, list[float]] = {"token": [], "enroll": []}
        async with httpx.AsyncClient(headers=self.headers, timeout=120) as api:

            async def one(name: str) -> None:
                node = self.nodes.setdefault(name, SimNode(name, self))
                async with limit:
                    t0 = time.perf_counter()
                    r = await self._token(api, name)
                    t1 = time.perf_counter()
                    await node.enroll(r.json()["token"])
                    t2 = time.perf_counter()
                times["token"].append(t1 - t0)
                times["enroll"].append(t2 - t1)

            await asyncio.gather(*(one(n) for n in names))
        return times

    async def _token(self, api: httpx.AsyncClient, name: str) -> httpx.Response:
        """A join token for ``name``; a kept-alive connection the server closed meanwhile is
        tried again (an unused token is harmless: it expires)."""
        for attempt in range(3):
            try:
                r = await api.post(
                    f"{self.api}/v1/node-tokens", json={"pool": self.pool, "node": name}
                )
                return r.raise_for_status()
            except httpx.TransportError:
                self.errors["token retried"] = self.errors.get("token retried", 0) + 1
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def connect(self, names: list[str]) -> int:
        """Open the streams of ``names`` (first beats spread over one interval); the number of
        nodes not welcomed within ``connect_seconds``."""
        nodes = [self.nodes[n] for n in names]
        if not nodes:  # a stage repeated (BENCH_STAGES=10,3000,3000): another window, as is
            return 0
        for n in nodes:
            n.task = asyncio.create_task(n.run(delay=random.uniform(0, self.heartbeat)))
        waits = [asyncio.create_task(n.welcomed.wait()) for n in nodes]
        _, late = await asyncio.wait(waits, timeout=self.connect_seconds)
        for w in late:
            w.cancel()
        return len(late)

    def welcomed(self, since: float = 0.0) -> dict[str, Any]:
        live = [n for n in self.nodes.values() if n.task is not None]
        return {
            "beating": sum(1 for n in live if n.acked_at > since),
            "live": len(live),
            "welcomed": sum(1 for n in live if n.welcomed.is_set()),
            "reconnected": sum(1 for n in live if n.sessions > 1),
            "sessions": sum(n.sessions for n in live),
            "errors": dict(self.errors),
        }

    async def serve(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        self._sampler = asyncio.create_task(self.sample_lag())  # until the process ends
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            what = command[0]
            reply: Any = None
            if what == "enroll":
                reply = await self.enroll(command[1], command[2])
            elif what == "connect":
                reply = await self.connect(command[1])
            elif what == "clear":
                for n in self.nodes.values():
                    n.rtts.clear()
                self.lags.clear()
                self.gc_pauses.clear()
                self.writes.clear()
            elif what == "collect":
                reply = [r for n in self.nodes.values() for r in n.rtts]
            elif what == "lag":
                reply = self.lag()
            elif what == "welcomed":
                reply = self.welcomed(*command[1:])
            elif what == "stop":
                await asyncio.gather(*(n.stop() for n in self.nodes.values()))
                conn.send(None)
                return
            conn.send(reply)


async def _serve(conn: Connection, cfg: dict[str, Any]) -> None:
    # the gateway's collector policy here too: thousands of streams' state, walked by every full
    # collection otherwise, made this process's own loop late (what it adds to each round trip)
    policy = keep_pauses_short(asyncio.get_running_loop().call_soon_threadsafe)
    paced = asyncio.create_task(pace_collections(policy))  # young collections on a clock
    try:
        await Swarm(cfg).serve(conn)
    finally:
        paced.cancel()


def main(conn: Connection, cfg: dict[str, Any]) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    run_server(_serve(conn, cfg))  # uvloop, as the gateway: less CPU per message
