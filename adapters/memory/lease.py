"""In-memory leader leases (twin of adapters/postgres/lease.py)."""

from __future__ import annotations


class MemoryLeases:
    """Leader leases shared by the processes of one in-memory "database"."""

    def __init__(self) -> None:
        self.holders: dict[str, object] = {}


class MemoryLeaderLease:
    """``MemoryLeaderLease(leases, name)``: at most one holder per name. ``crash()`` drops it
    as a dead process's session would."""

    def __init__(self, leases: MemoryLeases, name: str = "scheduler") -> None:
        self._leases = leases
        self._name = name

    async def acquire(self) -> bool:
        holder = self._leases.holders.setdefault(self._name, self)
        return holder is self

    async def release(self) -> None:
        if self._leases.holders.get(self._name) is self:
            del self._leases.holders[self._name]

    def crash(self) -> None:
        self._leases.holders.pop(self._name, None)
