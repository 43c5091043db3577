"""Simulated node daemons behind a simulated gateway, for the simulator and the tests.

The real use cases on both ends — ``NodeControl`` (the gateway's) and ``NodeAgent`` (each
daemon's) — exchange the real protocol messages through in-memory queues instead of gRPC. Each
node keeps its journal and its container runtime across daemon crashes, as a machine keeps its
SQLite file and its Docker engine. ``pump`` delivers messages both ways until nothing moves.

Faults: ``disconnect``/``reconnect`` (the stream drops; the workload keeps running),
``crash_daemon`` (kill -9: in-flight preparations die, the next daemon recovers from the
journal), ``partition`` (messages are lost in both directions until ``heal``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from adapters.memory.backend import MemoryBackend
from adapters.memory.journal import MemoryJournal
from adapters.sim.node_runtime import Refusal, SimRuntime
from application.context import Context
from application.enrollment import NodeIdentity
from application.node_agent import NodeAgent
from application.node_control import ControlSettings, NodeControl, Session
from domain.capsule import StorageCapabilities
from domain.catalog import RuntimePin, RuntimeSpec
from domain.node_messages import PrepareOrder, SourceChunk
from domain.node_protocol import NodeCapacity


class SimNodeBackend:
    """The node backend as the control plane sees it (a ``CoordinatedBackend``, registered in
    ``Context.coordinated``): it pins runtimes as the in-memory backend does and, like the real
    one, takes the Job Capsule to the nodes; the coordinator and the simulated gateway do the
    rest."""

    name = "node"
    storage = StorageCapabilities(capsule=True)

    def __init__(self) -> None:
        self._images = MemoryBackend(self.name, storage=self.storage)

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        return await self._images.pin(runtime)


@dataclass
class SimNode:
    name: str
    journal: MemoryJournal = field(default_factory=MemoryJournal)
    runtime: SimRuntime = field(init=False)
    agent: NodeAgent | None = None
    session: Session | None = None
    outbox: list[Any] = field(default_factory=list)
    seq: int = 0
    partitioned: bool = False

    def __post_init__(self) -> None:
        self.runtime = SimRuntime(self.name)


class SimNodeFleet:
    def __init__(
        self,
        ctx: Context,
        names: list[str],
        *,
        capacity: NodeCapacity | None = None,
        refusal: Refusal | None = None,
        settings: ControlSettings | None = None,
    ) -> None:
        self.ctx = ctx
        self.capacity = capacity or NodeCapacity(0, None, 4.0, 8192)
        self.control = NodeControl(ctx, "sim-gateway", settings)
        self.nodes = {n: SimNode(n) for n in names}
        for node in self.nodes.values():
            node.runtime.refusal = refusal or (lambda order: None)
        self.refused: list[str] = []  # why the gateway refused node messages

    # -- connections ------------------------------------------------------------------------

    def _send(self, node: SimNode) -> Any:
        async def send(body: Any) -> None:
            if node.session is None or node.partitioned:
                raise ConnectionError(f"node {node.name} is not connected")
            node.seq += 1
            node.outbox.append((node.seq, body))

        return send

    async def connect(self, name: str) -> Session:
        node = self.nodes[name]
        if node.agent is None:  # a (re)started daemon: recover from the journal first
            node.agent = NodeAgent(name, node.journal, node.runtime, self._send(node))
            await node.agent.recover()
        if node.session is not None:
            await self.control.close(node.session)
        hello = await node.agent.hello(self.capacity, "10.0.0.1", "sim")
        node.seq, node.outbox = 1, []
        node.partitioned = False
        node.session = await self.control.open(NodeIdentity(name, f"cred-{name}"), hello)
        node.session.last_seq = 1
        await node.agent.welcomed(node.session.epoch, node.session.installation)
        return node.session

    async def connect_all(self) -> None:
        for name in self.nodes:
            await self.connect(name)

    async def disconnect(self, name: str) -> None:
        node = self.nodes[name]
        if node.session is not None:
            await self.control.close(node.session)
        node.session, node.outbox = None, []

    async def crash_daemon(self, name: str) -> None:
        """kill -9 the daemon: its in-flight work dies; journal and containers stay."""
        node = self.nodes[name]
        if node.agent is not None:
            in_flight = node.agent.in_flight()
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        node.agent = None
        await self.disconnect(name)

    def partition(self, name: str) -> None:
        self.nodes[name].partitioned = True

    async def heal(self, name: str) -> None:
        await self.connect(name)  # the old stream died; the daemon reconnects

    # -- moving messages --------------------------------------------------------------------

    async def pump(self, rounds: int = 20) -> int:
        """Deliver node → gateway and gateway → node messages until nothing moves; each
        connected, unpartitioned node's heartbeat is recorded once."""
        for node in self.nodes.values():
            if node.session is not None and node.agent is not None and not node.partitioned:
                self.control.heartbeat(node.session)
        await self.control.flush()
        moved = 0
        for _ in range(rounds):
            n = await self._round()
            moved += n
            if n == 0:
                return moved
        return moved

    async def _round(self) -> int:
        moved = 0
        live = [n for n in self.nodes.values() if n.session is not None and n.agent is not None]
        for node in live:
            await node.agent.watch_once()  # type: ignore[union-attr]
            await self.settle(node)
            batch, node.outbox = node.outbox, []
            for seq, body in batch:
                if node.partitioned or node.session is None:
                    continue
                why = await self.control.handle(node.session, seq, body)
                if why is not None:
                    self.refused.append(why)
                moved += 1
        sessions = [n.session for n in live if n.session is not None and not n.partitioned]
        by_node = {s.node: s for s in sessions}
        todo = await self.control.commands_due(by_node) if sessions else {}
        for name, items in todo.items():
            node = self.nodes[name]
            if node.partitioned or node.agent is None:
                continue
            for item in items:
                moved += 1
                if item.order is not None:
                    await self.prepare(node, item.order)
                else:
                    await node.agent.on_command(item.command, 0.0)
            await self.settle(node)
        return moved

    async def prepare(self, node: SimNode, order: PrepareOrder) -> None:
        assert node.agent is not None
        if order.source_digest:
            with contextlib.suppress(Exception):
                data = await self.ctx.blob_store().read(order.source_digest)
                await node.agent.on_source(SourceChunk(order.source_digest, 0, data, True))
        await node.agent.on_prepare(order)

    @staticmethod
    async def settle(node: SimNode) -> None:
        if node.agent is None:
            return
        for _ in range(3):
            await asyncio.sleep(0)
        tasks = [t for t in node.agent.in_flight() if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- what really happens on the machines ------------------------------------------------

    def starts(self) -> dict[str, int]:
        """member id → how many times its container really started, on any node."""
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            for member, n in node.runtime.starts.items():
                counts[member] = counts.get(member, 0) + n
        return counts

    def kills(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            for member, n in node.runtime.kills.items():
                counts[member] = counts.get(member, 0) + n
        return counts

    def containers(self) -> dict[str, str]:
        """member id → node of every container that exists (created or running or exited)."""
        return {
            c.order.ref.member_id: n.name
            for n in self.nodes.values()
            for c in n.runtime.containers.values()
        }

    def finish(self, member_id: str, code: int = 0, output: bytes | None = None) -> bool:
        return any(n.runtime.finish(member_id, code, output) for n in self.nodes.values())

    def running(self) -> list[str]:
        return sorted(
            c.order.ref.member_id for n in self.nodes.values() for c in n.runtime.running()
        )
