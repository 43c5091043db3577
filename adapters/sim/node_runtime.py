"""A simulated container runtime for node daemons (the ``MemberRuntime`` port).

Containers are records: created by ``prepare``, running after ``start``, exited after
``finish``/``stop``/their fate. It counts every real start per member, so tests and the
simulator can check that no member ever starts twice and none starts without a commit. Like a
real engine it outlives the daemon: the simulator hands the same runtime to the daemon that
replaces a crashed one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from domain.errors import InvalidInput, Unavailable
from domain.node_daemon_ports import FoundContainer, ProgressCallback
from domain.node_messages import PrepareOrder
from domain.ports import Observation
from domain.telemetry import UsageSource

Refusal = Callable[[PrepareOrder], str | None]


@dataclass
class SimContainer:
    id: str
    order: PrepareOrder
    state: str = "created"  # created, running, exited
    exit_code: int | None = None
    log: bytes = b""
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # exited or removed
    labelled: bool = True  # False: its labels do not name its member fully (cannot be re-adopted)
    log_lost: str = ""  # set: the engine cannot give its output (final_log says this)
    # set: final_log waits for it (``log_asked`` tells a test that it does): a slow engine
    log_gate: asyncio.Event | None = None
    log_asked: asyncio.Event = field(default_factory=asyncio.Event)


class SimRuntime:
    """``engine``: the engine's identity (another machine has another); ``down``: when set,
    the engine cannot list, start, stop or remove containers, nor say who it is (Unavailable
    with this text)."""

    def __init__(self, node: str, refusal: Refusal | None = None, engine: str = "") -> None:
        self.node = node
        self.engine = engine or f"engine-{node}"
        self.down: str | None = None
        self.refusal: Refusal = refusal or (lambda order: None)
        self.containers: dict[str, SimContainer] = {}
        self.starts: Counter[str] = Counter()  # member id → real starts
        self.kills: Counter[str] = Counter()  # member id → running containers removed
        self.busy_ports: set[int] = set()

    async def prepare(
        self, order: PrepareOrder, source: bytes | None, on_progress: ProgressCallback
    ) -> str:
        why = self.refusal(order)
        if why is not None:
            raise InvalidInput(why)
        cid = f"c-{order.ref.member_id}"
        if cid not in self.containers:
            on_progress("creating the container", 1.0, "")
            self.containers[cid] = SimContainer(cid, order)
        return cid

    async def start(self, container_id: str) -> None:
        self._up()
        c = self.containers.get(container_id)
        if c is not None and c.state == "created":
            c.state = "running"
            self.starts[c.order.ref.member_id] += 1

    async def observe(self, container_id: str) -> Observation:
        c = self.containers.get(container_id)
        if c is None:
            return Observation("missing")
        if c.state == "running":
            return Observation("running")
        if c.state == "exited":
            return Observation("exited", c.exit_code)
        return Observation("starting")

    def finish(self, member_id: str, code: int, output: bytes | None = None) -> bool:
        """The member's process exits by itself (if it runs), having printed ``output``."""
        c = self.containers.get(f"c-{member_id}")
        if c is None or c.state != "running":
            return False
        c.state, c.exit_code = "exited", code
        c.ended.set()
        c.log = (
            output
            if output is not None
            else f"member {member_id} exited with code {code}\n".encode()
        )
        return True

    async def stop(self, container_id: str, grace_seconds: float) -> None:
        self._up()
        c = self.containers.get(container_id)
        if c is not None and c.state == "running":
            c.state, c.exit_code = "exited", 143
            c.ended.set()
        elif c is not None and c.state == "created":
            del self.containers[container_id]

    async def remove(self, container_id: str) -> None:
        self._up()
        c = self.containers.pop(container_id, None)
        if c is not None:
            c.ended.set()
        if c is not None and c.state == "running":
            self.kills[c.order.ref.member_id] += 1

    def _up(self) -> None:
        if self.down is not None:
            raise Unavailable(self.down)

    async def held(self, installation: str) -> dict[str, str]:
        self._up()
        return {
            c.order.ref.member_id: cid
            for cid, c in self.containers.items()
            if c.order.installation == installation and c.order.node == self.node
        }

    async def engine_id(self) -> str:
        self._up()
        return self.engine

    async def found(self, container_id: str) -> FoundContainer | None:
        c = self.containers.get(container_id)
        if c is None:
            return None
        o = c.order
        return FoundContainer(
            container_id,
            o.ref if c.labelled else None,
            o.job_id,
            o.image,
            o.gpu_indices,
            o.cpus,
            o.memory_mb,
            started=c.state != "created",
            metrics=bool(o.collector_token),
        )

    async def final_log(self, container_id: str, limit: int) -> tuple[bytes, bool]:
        c = self.containers.get(container_id)
        if c is not None and c.log_gate is not None:
            c.log_asked.set()
            await c.log_gate.wait()
        if c is not None and c.log_lost:
            raise Unavailable(c.log_lost)
        data = c.log if c is not None else b""
        return data[-limit:], len(data) > limit

    async def follow_logs(self, container_id: str) -> AsyncIterator[bytes]:
        """Its whole output once it has exited (as if it printed everything at the end)."""
        c = self.containers.get(container_id)
        if c is None:
            return
        await c.ended.wait()
        if c.state == "exited" and c.log:
            yield c.log

    def port_free(self, port: int) -> bool:
        return port not in self.busy_ports

    async def usage_source(self, container_id: str) -> UsageSource | None:
        """Simulated members have no processes to measure."""
        return None

    def running(self) -> list[SimContainer]:
        return [c for c in self.containers.values() if c.state == "running"]
