"""A simulated execution backend: members run for a seeded time on their reserved nodes.

It is ``adapters.memory.backend.MemoryBackend`` (the same ExecutionBackend contract, run by
``tests/contract``) with a clock added:

* ``fate(request)`` decides at launch how long a member runs and how it exits: ``(seconds,
  exit_code)``, or ``None`` to run until ``finish(handle, code)`` or ``stop``;
* ``refusal(request)`` may return an error to refuse a new launch with (``InvalidInput``: the
  launch can never work; ``Unavailable``: retry later); a refused launch starts nothing;
* ``advance()`` ends every member whose time is up (call it after moving the clock);
* ``disconnect(node)`` / ``reconnect(node)``: while a node is out of contact its members keep
  running (and may end), but are observed ``unknown``, cannot be stopped, and nothing can be
  launched there (``Unavailable``).

``running()`` lists what really runs where, so that the simulator can check that no two live
workloads ever share a GPU, whatever the database says.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from adapters.memory.backend import MemoryBackend
from domain.errors import TunePlaneError, Unavailable
from domain.ports import Clock, LaunchRequest

Fate = Callable[[LaunchRequest], tuple[float, int] | None]
Refusal = Callable[[LaunchRequest], TunePlaneError | None]


class SimBackend(MemoryBackend):
    def __init__(
        self,
        name: str,
        clock: Clock,
        *,
        fate: Fate | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        super().__init__(name, behaviour=self._admit)
        self.clock = clock
        self.fate: Fate = fate or (lambda request: None)
        self.refusal: Refusal = refusal or (lambda request: None)
        self.ends: dict[str, tuple[datetime, int]] = {}  # handle → (when it exits, exit code)
        self.refused = 0

    def _admit(self, request: LaunchRequest) -> None:
        error = self.refusal(request)
        if error is not None:
            self.refused += 1
            raise error
        return None  # runs until advance(), finish() or stop()

    async def launch(self, request: LaunchRequest) -> str:
        self._check()
        a = request.assignment
        if a is not None and a.node in self.lost_nodes:
            raise Unavailable(
                f"node {a.node} is out of contact; member {request.member_id} cannot be "
                "launched there now",
                fix="retry later",
            )
        before = self.launches
        handle = await super().launch(request)
        if self.launches > before:  # a new member, not an idempotent repeat
            fate = self.fate(request)
            if fate is not None:
                seconds, code = fate
                self.ends[handle] = (self.clock.now() + timedelta(seconds=seconds), code)
        return handle

    def advance(self) -> list[str]:
        """End every member whose time is up, earliest first; return their handles."""
        now = self.clock.now()
        due = sorted((end, handle) for handle, (end, _) in self.ends.items() if end <= now)
        for _, handle in due:
            _, code = self.ends.pop(handle)
            if handle in self.members:
                self.finish(handle, code, f"exited with code {code}\n".encode())
        return [handle for _, handle in due]

    def disconnect(self, node: str) -> None:
        self.lost_nodes.add(node)

    def reconnect(self, node: str) -> None:
        self.lost_nodes.discard(node)

    def running(self) -> list[tuple[str, LaunchRequest]]:
        """(handle, request) of every member that really runs now, by handle."""
        return sorted(
            ((h, m.request) for h, m in self.members.items() if m.running), key=lambda x: x[0]
        )
