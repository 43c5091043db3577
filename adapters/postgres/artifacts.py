"""domain.ports.ArtifactRepository on PostgreSQL (table ``artifacts``, migration 0008)."""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from adapters.postgres.tables import artifacts
from domain.artifacts import ArtifactRecord, Manifest
from domain.canonical import canonical_json


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
                manifest=canonical_json(record.manifest.to_dict()).decode(),
                recorded_at=record.recorded_at,
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
            )
            for r in rows
        ]
