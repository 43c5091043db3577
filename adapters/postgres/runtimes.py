"""domain.ports.RuntimeRepository on PostgreSQL (table ``runtimes``, migration 0010)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from adapters.postgres.tables import runtimes
from domain.catalog import RuntimeSpec


def _values(r: RuntimeSpec) -> dict[str, Any]:
    return {
        "name": r.name,
        "image": r.image,
        "digest": r.digest,
        "python": r.python,
        "frameworks": dict(r.frameworks),
        "process_model": r.process_model,
        "description": r.description,
        "added_by": r.added_by,
        "added_at": r.added_at,
        "revision": r.revision,
    }


def _runtime(row: Any) -> RuntimeSpec:
    return RuntimeSpec(
        name=row.name,
        image=row.image,
        python=row.python,
        process_model=row.process_model,
        description=row.description,
        digest=row.digest,
        frameworks=dict(row.frameworks),
        added_by=row.added_by,
        added_at=row.added_at,
        revision=row.revision,
    )


class PostgresRuntimeRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def get(self, name: str) -> RuntimeSpec | None:
        with translated(f"read runtime {name}"):
            row = (
                await self._conn.execute(select(runtimes).where(runtimes.c.name == name))
            ).first()
        return _runtime(row) if row is not None else None

    async def list(self) -> list[RuntimeSpec]:
        with translated("list runtimes"):
            rows = (await self._conn.execute(select(runtimes).order_by(runtimes.c.name))).all()
        return [_runtime(r) for r in rows]

    async def add(self, runtime: RuntimeSpec) -> RuntimeSpec | None:
        stmt = (
            pg_insert(runtimes)
            .values(**_values(runtime))
            .on_conflict_do_nothing(index_elements=[runtimes.c.name])
            .returning(runtimes.c.name)
        )
        with translated(f"add runtime {runtime.name}"):
            if (await self._conn.execute(stmt)).first() is not None:
                return None
        return await self.get(runtime.name)

    async def replace(self, runtime: RuntimeSpec, revision: int) -> bool:
        stmt = (
            update(runtimes)
            .where(runtimes.c.name == runtime.name, runtimes.c.revision == revision)
            .values(**_values(runtime))
            .returning(runtimes.c.name)
        )
        with translated(f"replace runtime {runtime.name}"):
            return (await self._conn.execute(stmt)).first() is not None
