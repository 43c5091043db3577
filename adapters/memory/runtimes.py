"""The runtime registry of domain.ports.RuntimeRepository, in memory."""

from __future__ import annotations

from adapters.memory.db import TableDef, Tx
from domain.catalog import RuntimeSpec

RUNTIME_TABLES = [TableDef("runtimes", pk=lambda r: r.name)]  # frameworks: a dict, copied


class MemoryRuntimeRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def get(self, name: str) -> RuntimeSpec | None:
        found: RuntimeSpec | None = self._tx.get("runtimes", name)
        return found

    async def list(self) -> list[RuntimeSpec]:
        rows: list[RuntimeSpec] = self._tx.select("runtimes", lambda r: True)
        return sorted(rows, key=lambda r: r.name)

    async def add(self, runtime: RuntimeSpec) -> RuntimeSpec | None:
        await self._tx.lock(("runtimes", "pk", runtime.name))  # as INSERT … ON CONFLICT
        existing: RuntimeSpec | None = self._tx.get("runtimes", runtime.name)
        if existing is not None:
            return existing
        self._tx.write("runtimes", runtime)
        return None

    async def replace(self, runtime: RuntimeSpec, revision: int) -> bool:
        await self._tx.lock(("runtimes", "pk", runtime.name))  # the row lock of an UPDATE
        existing: RuntimeSpec | None = self._tx.get("runtimes", runtime.name)
        if existing is None or existing.revision != revision:
            return False
        self._tx.write("runtimes", runtime)
        return True
