"""The artifact manifests of domain.ports.ArtifactRepository, in memory."""

from __future__ import annotations

from adapters.memory.db import TableDef, Tx
from domain.artifacts import ArtifactRecord
from domain.errors import NotFound

ARTIFACT_TABLES = [TableDef("artifacts", pk=lambda r: r.member_id, immutable=True)]


class MemoryArtifactRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def record(self, record: ArtifactRecord) -> bool:
        if self._tx.get("members", record.member_id) is None:
            raise NotFound(f"member {record.member_id} does not exist", fix="check the member id")
        await self._tx.lock(("artifacts", "pk", record.member_id))  # as INSERT … ON CONFLICT
        if self._tx.get("artifacts", record.member_id) is not None:
            return False
        self._tx.write("artifacts", record)
        return True

    async def for_job(self, job_id: str) -> list[ArtifactRecord]:
        rows: list[ArtifactRecord] = self._tx.select("artifacts", lambda r: r.job_id == job_id)
        return sorted(rows, key=lambda r: (r.attempt, r.member_index))
