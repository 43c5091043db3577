"""Published plugin versions in memory (``domain.plugin_ports.PluginRepository``)."""

from __future__ import annotations

import builtins
from dataclasses import replace

from adapters.memory.db import TableDef, Tx
from domain.plugins import Disabled, PluginRecord, listing_order

PLUGIN_TABLES = [TableDef("plugins", pk=lambda r: (r.name, r.version), immutable=True)]


class MemoryPluginRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, record: PluginRecord) -> PluginRecord | None:
        key = (record.name, record.version)
        await self._tx.lock(("plugins", "pk", key))  # as INSERT … ON CONFLICT DO NOTHING
        existing: PluginRecord | None = self._tx.get("plugins", key)
        if existing is not None:
            return existing
        self._tx.write("plugins", record)
        return None

    async def get(self, name: str, version: str) -> PluginRecord | None:
        found: PluginRecord | None = self._tx.get("plugins", (name, version))
        return found

    async def versions(self, name: str) -> builtins.list[PluginRecord]:
        return listing_order(self._tx.select("plugins", lambda r: r.name == name))

    async def list(self, group: str | None = None) -> builtins.list[PluginRecord]:
        rows = self._tx.select("plugins", lambda r: group is None or r.declaration.group == group)
        return listing_order(rows)

    async def set_disabled(
        self, name: str, version: str, disabled: Disabled | None
    ) -> PluginRecord | None:
        await self._tx.lock(("plugins", "pk", (name, version)))
        found: PluginRecord | None = self._tx.get("plugins", (name, version))
        if found is None:
            return None
        updated = replace(found, disabled=disabled)
        self._tx.write("plugins", updated)
        return updated
