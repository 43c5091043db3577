"""Pool checks in memory (``domain.ports.CheckRepository``)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from adapters.memory.db import TableDef, Tx
from domain.fleet_check import NodeResult, PoolCheck

CHECK_TABLES = [TableDef("pool_checks", pk=lambda c: c.id, immutable=True)]


class MemoryCheckRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, check: PoolCheck) -> None:
        await self._tx.insert("pool_checks", check, f"pool check {check.id}")

    async def latest(self, pool: str) -> PoolCheck | None:
        found: list[PoolCheck] = self._tx.select("pool_checks", lambda c: c.pool == pool)
        return max(found, key=lambda c: (c.started_at, c.id), default=None)

    async def unfinished(self) -> builtins.list[PoolCheck]:
        found: list[PoolCheck] = self._tx.select("pool_checks", lambda c: c.finished_at is None)
        return sorted(found, key=lambda c: (c.started_at, c.id))

    async def finish(
        self, check_id: str, results: Sequence[NodeResult], note: str, at: datetime
    ) -> bool:
        await self._tx.lock(("pool_checks", "pk", check_id))
        check: PoolCheck | None = self._tx.get("pool_checks", check_id)
        if check is None or check.finished_at is not None:
            return False
        self._tx.write(
            "pool_checks", replace(check, finished_at=at, results=tuple(results), note=note)
        )
        return True
