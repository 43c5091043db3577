"""Pool checks on PostgreSQL (``domain.ports.CheckRepository``): table ``pool_checks``."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from domain.fleet_check import NodeResult, PoolCheck

_ADD = text(
    "INSERT INTO pool_checks (id, pool, job_id, nodes, started_at) "
    "VALUES (:id, :pool, :job_id, CAST(:nodes AS jsonb), :started_at)"
)
_COLUMNS = "id, pool, job_id, nodes, started_at, finished_at, results, note"
_LATEST = text(
    f"SELECT {_COLUMNS} FROM pool_checks WHERE pool = :pool "
    "ORDER BY started_at DESC, id DESC LIMIT 1"
)
_UNFINISHED = text(
    f"SELECT {_COLUMNS} FROM pool_checks WHERE finished_at IS NULL ORDER BY started_at, id"
)
_FINISH = text(
    "UPDATE pool_checks SET finished_at = :at, results = CAST(:results AS jsonb), note = :note "
    "WHERE id = :id AND finished_at IS NULL RETURNING id"
)


def _check(r: Any) -> PoolCheck:
    results = tuple(NodeResult(x["node"], x["ok"], x["detail"]) for x in r["results"] or [])
    return PoolCheck(
        r["id"],
        r["pool"],
        r["job_id"],
        tuple(r["nodes"]),
        r["started_at"],
        r["finished_at"],
        results,
        r["note"],
    )


class PostgresCheckRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, check: PoolCheck) -> None:
        params = {
            "id": check.id,
            "pool": check.pool,
            "job_id": check.job_id,
            "nodes": json.dumps(list(check.nodes)),
            "started_at": check.started_at,
        }
        with translated(f"store pool check {check.id}"):
            await self._conn.execute(_ADD, params)

    async def latest(self, pool: str) -> PoolCheck | None:
        with translated(f"read the last check of pool {pool}"):
            row = (await self._conn.execute(_LATEST, {"pool": pool})).mappings().first()
        return _check(row) if row else None

    async def unfinished(self) -> builtins.list[PoolCheck]:
        with translated("list unfinished pool checks"):
            rows = (await self._conn.execute(_UNFINISHED)).mappings().all()
        return [_check(r) for r in rows]

    async def finish(
        self, check_id: str, results: Sequence[NodeResult], note: str, at: datetime
    ) -> bool:
        body = json.dumps([{"node": r.node, "ok": r.ok, "detail": r.detail} for r in results])
        params = {"id": check_id, "at": at, "results": body, "note": note}
        with translated(f"finish pool check {check_id}"):
            return (await self._conn.execute(_FINISH, params)).first() is not None
