"""domain.plugin_ports.PluginRepository on PostgreSQL (table ``plugins``, migration 0009)."""

from __future__ import annotations

import builtins
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from adapters.postgres.plugin_tables import plugins
from domain.artifacts import Manifest
from domain.plugins import Declaration, Disabled, PluginRecord, listing_order


def _record(r: Any) -> PluginRecord:
    disabled = (
        Disabled(r.disabled_at, r.disabled_by, r.disabled_reason)
        if r.disabled_at is not None
        else None
    )
    return PluginRecord(
        Declaration.from_dict(r.declaration),
        Manifest.from_dict(r.manifest),
        r.blob,
        r.size,
        r.published_by,
        r.published_at,
        disabled,
    )


def _disabled_values(d: Disabled | None) -> dict[str, Any]:
    if d is None:
        return {"disabled_at": None, "disabled_by": None, "disabled_reason": None}
    return {"disabled_at": d.at, "disabled_by": d.by, "disabled_reason": d.reason}


class PostgresPluginRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, record: PluginRecord) -> PluginRecord | None:
        decl = record.declaration
        stmt = (
            pg_insert(plugins)
            .values(
                name=decl.name,
                version=decl.version,
                group=decl.group,
                executes=decl.executes,
                capabilities=list(decl.capabilities),
                description=decl.description,
                declaration=decl.to_dict(),
                manifest=record.manifest.to_dict(),
                digest=record.digest,
                blob=record.blob,
                size=record.size,
                published_by=record.published_by,
                published_at=record.published_at,
                **_disabled_values(record.disabled),
            )
            .on_conflict_do_nothing(index_elements=[plugins.c.name, plugins.c.version])
            .returning(plugins.c.name)
        )
        with translated(f"publish plugin {decl.ref}"):
            if (await self._conn.execute(stmt)).first() is not None:
                return None
        existing = await self.get(decl.name, decl.version)  # the winner's row, committed
        assert existing is not None, "a conflicting row is never deleted"
        return existing

    async def get(self, name: str, version: str) -> PluginRecord | None:
        query = select(plugins).where(plugins.c.name == name, plugins.c.version == version)
        with translated(f"read plugin {name}@{version}"):
            row = (await self._conn.execute(query)).first()
        return _record(row) if row else None

    async def versions(self, name: str) -> builtins.list[PluginRecord]:
        with translated(f"read the versions of plugin {name}"):
            rows = (await self._conn.execute(select(plugins).where(plugins.c.name == name))).all()
        return listing_order(_record(r) for r in rows)

    async def list(self, group: str | None = None) -> builtins.list[PluginRecord]:
        query = select(plugins)
        if group is not None:
            query = query.where(plugins.c.group == group)
        with translated("list plugins"):
            rows = (await self._conn.execute(query)).all()
        return listing_order(_record(r) for r in rows)

    async def set_disabled(
        self, name: str, version: str, disabled: Disabled | None
    ) -> PluginRecord | None:
        stmt = (
            update(plugins)
            .where(plugins.c.name == name, plugins.c.version == version)
            .values(**_disabled_values(disabled))
            .returning(*plugins.c)
        )
        with translated(f"change plugin {name}@{version}"):
            row = (await self._conn.execute(stmt)).first()
        return _record(row) if row else None
