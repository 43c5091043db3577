"""Wake-up hints within one process (``domain.coordination_ports.Signals``): for tests that run
several loops on one event loop and want them to wake each other as PostgreSQL's would."""

from __future__ import annotations

from collections.abc import Callable


class InProcessSignals:
    def __init__(self) -> None:
        self._wakes: dict[str, list[Callable[[], None]]] = {}
        self.sent = 0

    async def notify(self, topic: str) -> None:
        self.sent += 1
        for wake in self._wakes.get(topic, []):
            wake()

    def subscribe(self, topic: str, wake: Callable[[], None]) -> None:
        self._wakes.setdefault(topic, []).append(wake)
