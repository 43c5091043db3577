"""An execution backend in memory: members are records that run until told otherwise.

Production code for the simulator and for application tests; it keeps the ExecutionBackend
contract (``tests/contract/test_backend_contract.py`` runs it beside the Docker backend):
launch is idempotent per member id, a stopped member exits with 128+SIGTERM, logs of a released
member raise NotFound, and everything raises Unavailable while ``available`` is False.

A member's fate is decided by ``behaviour(request)``: ``None`` keeps it running until
``finish(handle, code)`` or ``stop``; ``(code, output)`` makes it exit at once; raising (e.g.
InvalidInput) refuses the launch and starts nothing. Members on a node in ``lost_nodes`` are
observed as ``unknown`` (control contact lost), and cannot be stopped until contact returns.
A member whose id is in ``waiting`` is observed ``starting`` with that reason (a batch
scheduler's queue) until the test removes it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from domain.capsule import StorageCapabilities
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import InvalidInput, NotFound, Unavailable
from domain.ports import LaunchRequest, Observation
from domain.runtimes import digest_mismatch, pin_of

Behaviour = Callable[[LaunchRequest], tuple[int, bytes] | None]
SIGTERM_EXIT = 128 + 15


@dataclass
class MemoryMember:
    request: LaunchRequest
    output: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    cause: str = ""  # why it ended, as a backend's scheduler would say (preempted, node-lost)
    why: str = ""

    @property
    def running(self) -> bool:
        return self.exit_code is None


class MemoryBackend:
    def __init__(
        self,
        name: str = "local",
        *,
        images: dict[str, str] | None = None,
        behaviour: Behaviour | None = None,
        storage: StorageCapabilities | None = None,
    ) -> None:
        self.name = name
        self.storage = (
            storage or StorageCapabilities()
        )  # what it claims to offer (launch ignores the capsule)
        self.images = images  # image → digest; None accepts every image
        self.behaviour = behaviour or (lambda request: None)
        self.available = True
        self.lost_nodes: set[str] = set()
        self.waiting: dict[str, str] = {}  # member id → why it has not started (a queue)
        self.members: dict[str, MemoryMember] = {}
        self.launches = 0  # launches that created a member (idempotent repeats do not count)
        self.stops = 0

    def _check(self) -> None:
        if not self.available:
            raise Unavailable(f"backend {self.name} is unavailable", fix="retry later")

    def _member(self, handle: str) -> MemoryMember:
        member = self.members.get(handle)
        if member is None:
            raise NotFound(f"no member {handle}", fix="it was released")
        return member

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        self._check()
        if self.images is not None and runtime.image not in self.images:
            raise InvalidInput(
                f"image {runtime.image} of runtime {runtime.name} is not present",
                fix=f"build it: tp runtime build {runtime.name}",
                field="intent.runtime",
            )
        digest = (
            (self.images or {}).get(runtime.image)
            or runtime.digest
            or ("sha256:" + hashlib.sha256(runtime.image.encode()).hexdigest())
        )
        if runtime.digest is not None and digest != runtime.digest:
            raise digest_mismatch(runtime, digest)
        return pin_of(runtime, digest)

    async def launch(self, request: LaunchRequest) -> str:
        self._check()
        handle = f"mem-{request.member_id}"
        if handle in self.members:
            return handle
        fate = self.behaviour(request)  # may raise: a refused launch starts nothing
        member = MemoryMember(request)
        self.members[handle] = member
        self.launches += 1
        if fate is not None:
            self.finish(handle, fate[0], fate[1])
        return handle

    def write(self, handle: str, data: bytes) -> None:
        member = self._member(handle)
        member.output += data
        member.changed.set()
        member.changed = asyncio.Event()

    def finish(
        self, handle: str, exit_code: int, output: bytes = b"", cause: str = "", why: str = ""
    ) -> None:
        """The member exits (if it still runs) with ``exit_code`` after writing ``output``;
        ``cause`` and ``why``: ended by the backend's scheduler (preempted, its node lost)."""
        member = self._member(handle)
        if member.running:
            member.output += output
            member.exit_code = exit_code
            member.cause, member.why = cause, why
        member.changed.set()

    async def observe(self, handle: str) -> Observation:
        self._check()
        member = self.members.get(handle)
        if member is None:
            return Observation("missing")
        if self._out_of_contact(member):
            return Observation("unknown", reason="control contact with its node is lost")
        waits = self.waiting.get(member.request.member_id)
        if member.running and waits:
            return Observation("starting", reason=waits)
        if member.running:
            return Observation("running")
        why = member.why or f"exited with code {member.exit_code}"
        return Observation("exited", member.exit_code, why, member.cause)

    def _out_of_contact(self, member: MemoryMember) -> bool:
        a = member.request.assignment
        return a is not None and a.node in self.lost_nodes

    async def stop(self, handle: str, grace_seconds: float) -> None:
        self._check()
        if handle in self.members and self._out_of_contact(self.members[handle]):
            raise Unavailable(f"member {handle} is out of contact", fix="retry later")
        if handle in self.members and self.members[handle].running:
            self.stops += 1
            self.finish(handle, SIGTERM_EXIT)

    async def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        self._check()
        member = self._member(handle)
        sent = 0
        while True:
            if len(member.output) > sent:
                yield bytes(member.output[sent:])
                sent = len(member.output)
            if not follow or not member.running:
                return
            await member.changed.wait()

    async def held(self) -> dict[str, str]:
        self._check()
        return {m.request.member_id: handle for handle, m in self.members.items()}

    async def release(self, handle: str) -> None:
        self._check()
        self.members.pop(handle, None)

    async def ping(self) -> None:
        self._check()

    async def close(self) -> None:
        return None
