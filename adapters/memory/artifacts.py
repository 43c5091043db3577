"""The artifact manifests (domain.artifact_ports.ArtifactRepository) and the requests to scan
outputs on nodes again (domain.node_ports.OutputScanRepository), in memory."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime

from adapters.memory.db import TableDef, Tx
from domain.artifacts import ArtifactRecord, ScanRequest, ScanResult
from domain.checkpoints import Checkpoint
from domain.errors import NotFound

ARTIFACT_TABLES = [
    TableDef("artifacts", pk=lambda r: r.member_id, immutable=True),
    TableDef("checkpoints", pk=lambda r: (r.job_id, r.attempt, r.name), immutable=True),
]


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


class MemoryCheckpointRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def record(self, checkpoint: Checkpoint) -> bool:
        if self._tx.get("jobs", checkpoint.job_id) is None:
            raise NotFound(f"job {checkpoint.job_id} does not exist", fix="check the job id")
        key = (checkpoint.job_id, checkpoint.attempt, checkpoint.name)
        await self._tx.lock(("checkpoints", "pk", key))  # as INSERT … ON CONFLICT
        if self._tx.get("checkpoints", key) is not None:
            return False
        self._tx.write("checkpoints", checkpoint)
        return True

    async def for_job(self, job_id: str) -> list[Checkpoint]:
        rows: list[Checkpoint] = self._tx.select("checkpoints", lambda r: r.job_id == job_id)
        return sorted(rows, key=lambda r: (r.attempt, r.name))

    async def drop(self, job_id: str, attempt: int, name: str) -> None:
        if self._tx.get("checkpoints", (job_id, attempt, name)) is not None:
            self._tx.delete("checkpoints", (job_id, attempt, name))


@dataclass(frozen=True, slots=True)
class _Scan:
    request: ScanRequest
    result: ScanResult | None = None


SCAN_TABLES = [TableDef("output_scans", pk=lambda r: r.request.id, immutable=True)]


class MemoryOutputScanRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def request(self, scan: ScanRequest) -> None:
        await self._tx.insert("output_scans", _Scan(scan), f"output scan {scan.id}")

    async def pending(self, nodes: Collection[str] | None, since: datetime) -> list[ScanRequest]:
        wanted = None if nodes is None else set(nodes)
        rows: list[_Scan] = self._tx.select(
            "output_scans",
            lambda r: r.result is None and (wanted is None or r.request.node in wanted)
            and r.request.requested_at >= since,
        )  # fmt: skip
        return sorted((r.request for r in rows), key=lambda s: (s.requested_at, s.id))

    async def answer(self, node: str, result: ScanResult) -> bool:
        await self._tx.lock(("output_scans", "pk", result.request_id))
        row: _Scan | None = self._tx.get("output_scans", result.request_id)
        if row is None or row.result is not None or row.request.node != node:
            return False
        self._tx.write("output_scans", replace(row, result=result))
        return True

    async def result(self, request_id: str) -> ScanResult | None:
        row: _Scan | None = self._tx.get("output_scans", request_id)
        return None if row is None else row.result

    async def prune(self, before: datetime) -> int:
        old: list[_Scan] = self._tx.select(
            "output_scans", lambda r: r.request.requested_at < before
        )
        for row in old:
            self._tx.delete("output_scans", row.request.id)
        return len(old)
