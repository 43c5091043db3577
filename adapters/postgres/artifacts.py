"""domain.artifact_ports.ArtifactRepository (table ``artifacts``, migration 0008) and
domain.node_ports.OutputScanRepository (table ``output_scans``, migration 0011) on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime

from sqlalchemy import Text, any_, bindparam, delete, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.artifact_tables import artifacts, checkpoints, output_scans
from adapters.postgres.errors import translated
from domain.artifacts import ArtifactFile, ArtifactRecord, Manifest, ScanRequest, ScanResult
from domain.canonical import canonical_json
from domain.checkpoints import Checkpoint


class PostgresArtifactRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def record(self, record: ArtifactRecord) -> bool:
        stmt = (
            pg_insert(artifacts)
            .values(
                member_id=record.member_id,
                job_id=record.job_id,
                attempt_id=record.attempt_id,
                attempt=record.attempt,
                member_index=record.member_index,
                digest=record.manifest.digest,
                manifest=_manifest_json(record.manifest),
                recorded_at=record.recorded_at,
                node=record.node,
            )
            .on_conflict_do_nothing(index_elements=[artifacts.c.member_id])
            .returning(artifacts.c.member_id)
        )
        with translated(f"record the artifacts of member {record.member_id}"):
            return (await self._conn.execute(stmt)).first() is not None

    async def for_job(self, job_id: str) -> list[ArtifactRecord]:
        query = (
            select(artifacts)
            .where(artifacts.c.job_id == job_id)
            .order_by(artifacts.c.attempt, artifacts.c.member_index)
        )
        with translated(f"read the artifacts of job {job_id}"):
            rows = (await self._conn.execute(query)).all()
        return [
            ArtifactRecord(
                r.member_id,
                r.job_id,
                r.attempt_id,
                r.attempt,
                r.member_index,
                Manifest.from_dict(json.loads(r.manifest)),
                r.recorded_at,
                r.node,
            )
            for r in rows
        ]


class PostgresCheckpointRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def record(self, checkpoint: Checkpoint) -> bool:
        stmt = (
            pg_insert(checkpoints)
            .values(
                job_id=checkpoint.job_id,
                attempt=checkpoint.attempt,
                name=checkpoint.name,
                step=checkpoint.step,
                digest=checkpoint.digest,
                manifest=checkpoint.manifest.to_dict(),
                recorded_at=checkpoint.recorded_at,
                kept_in=checkpoint.kept_in or None,
            )
            .on_conflict_do_nothing()
            .returning(checkpoints.c.name)
        )
        what = f"record checkpoint {checkpoint.name} of job {checkpoint.job_id}"
        with translated(what):
            return (await self._conn.execute(stmt)).first() is not None

    async def for_job(self, job_id: str) -> list[Checkpoint]:
        query = (
            select(checkpoints)
            .where(checkpoints.c.job_id == job_id)
            .order_by(checkpoints.c.attempt, checkpoints.c.name)
        )
        with translated(f"read the checkpoints of job {job_id}"):
            rows = (await self._conn.execute(query)).all()
        return [
            Checkpoint(
                r.job_id,
                r.attempt,
                r.name,
                r.step,
                Manifest.from_dict(r.manifest),
                r.recorded_at,
                r.kept_in or "",
            )
            for r in rows
        ]

    async def drop(self, job_id: str, attempt: int, name: str) -> None:
        stmt = delete(checkpoints).where(
            checkpoints.c.job_id == job_id,
            checkpoints.c.attempt == attempt,
            checkpoints.c.name == name,
        )
        with translated(f"forget checkpoint {name} of job {job_id}"):
            await self._conn.execute(stmt)


class PostgresOutputScanRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def request(self, scan: ScanRequest) -> None:
        stmt = output_scans.insert().values(
            id=scan.id,
            node=scan.node,
            job_id=scan.job_id,
            attempt_id=scan.attempt_id,
            member_id=scan.member_id,
            member_index=scan.member_index,
            requested_at=scan.requested_at,
            fetch_path=None if scan.fetch is None else scan.fetch.path,
            fetch_size=None if scan.fetch is None else scan.fetch.size,
            fetch_sha256=None if scan.fetch is None else scan.fetch.sha256,
        )
        with translated(f"record output scan {scan.id}"):
            await self._conn.execute(stmt)

    async def pending(self, nodes: Collection[str] | None, since: datetime) -> list[ScanRequest]:
        t = output_scans.c
        query = (
            select(t.id, t.node, t.job_id, t.attempt_id, t.member_id, t.member_index)
            .add_columns(t.requested_at, t.fetch_path, t.fetch_size, t.fetch_sha256)
            .where(t.done_at.is_(None), t.requested_at >= since)
            .order_by(t.requested_at, t.id)
        )
        if nodes is not None:  # the gateway asks for every node (None): no array of 10,000
            query = query.where(t.node == any_(bindparam("nodes", list(nodes), type_=ARRAY(Text))))
        with translated("read pending output scans"):
            rows = (await self._conn.execute(query)).all()
        return [
            ScanRequest(
                r.id, r.node, r.job_id, r.attempt_id, r.member_id, r.member_index,
                r.requested_at, _fetch(r.fetch_path, r.fetch_size, r.fetch_sha256),
            )
            for r in rows
        ]  # fmt: skip

    async def answer(self, node: str, result: ScanResult) -> bool:
        t = output_scans.c
        manifest = result.manifest
        stmt = (
            update(output_scans)
            .where(t.id == result.request_id, t.node == node, t.done_at.is_(None))
            .values(
                done_at=result.done_at,
                manifest=None if manifest is None else _manifest_json(manifest),
                error=result.error,
            )
            .returning(t.id)
        )
        with translated(f"record the answer to output scan {result.request_id}"):
            return (await self._conn.execute(stmt)).first() is not None

    async def result(self, request_id: str) -> ScanResult | None:
        t = output_scans.c
        query = select(t.done_at, t.manifest, t.error).where(t.id == request_id)
        with translated(f"read output scan {request_id}"):
            row = (await self._conn.execute(query)).first()
        if row is None or row.done_at is None:
            return None
        manifest = None if row.manifest is None else Manifest.from_dict(json.loads(row.manifest))
        return ScanResult(request_id, manifest, row.error, row.done_at)

    async def prune(self, before: datetime) -> int:
        stmt = delete(output_scans).where(output_scans.c.requested_at < before)
        with translated("prune output scans"):
            return (await self._conn.execute(stmt)).rowcount or 0


def _fetch(path: str | None, size: int | None, sha256: str | None) -> ArtifactFile | None:
    return (
        None if path is None or size is None or sha256 is None else ArtifactFile(path, size, sha256)
    )


def _manifest_json(manifest: Manifest) -> str:
    return canonical_json(manifest.to_dict()).decode()
