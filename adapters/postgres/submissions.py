"""Previews and the submission ledger."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import insert_new
from adapters.postgres.tables import previews, submissions
from domain.errors import Conflict
from domain.jobs import Submission
from domain.submission import Preview

MAX_CLAIM_ROUNDS = 20


class PostgresPreviewRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, preview: Preview) -> None:
        await insert_new(
            self._conn, previews, codec.preview_values(preview), f"preview {preview.id}"
        )

    async def get(self, preview_id: str) -> Preview | None:
        with translated(f"get preview {preview_id}"):
            row = (
                (await self._conn.execute(select(previews).where(previews.c.id == preview_id)))
                .mappings()
                .first()
            )
        return codec.preview_from_row(row) if row else None


class PostgresSubmissionLedger:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def claim(self, submission: Submission) -> Submission | None:
        """INSERT … ON CONFLICT DO NOTHING; on a conflict return the row that holds the retry
        key, else the one that holds the preview. A conflicting transaction that is still open
        makes the INSERT wait for it; if it rolled back, the next round inserts."""
        with translated(f"claim retry key {submission.retry_key}"):
            for _ in range(MAX_CLAIM_ROUNDS):
                inserted = (
                    await self._conn.execute(
                        pg_insert(submissions)
                        .values(codec.submission_values(submission))
                        .on_conflict_do_nothing()
                        .returning(submissions.c.retry_key)
                    )
                ).first()
                if inserted is not None:
                    return None
                for column, value in (
                    (submissions.c.retry_key, submission.retry_key),
                    (submissions.c.preview_id, submission.preview_id),
                ):
                    row = (
                        (await self._conn.execute(select(submissions).where(column == value)))
                        .mappings()
                        .first()
                    )
                    if row is not None:
                        return codec.submission_from_row(row)
                taken = (
                    await self._conn.execute(
                        select(submissions.c.retry_key).where(
                            submissions.c.job_id == submission.job_id
                        )
                    )
                ).first()
                if taken is not None:
                    raise Conflict(
                        f"job id {submission.job_id} is already recorded for another submission",
                        fix="use a fresh job id",
                    )
        raise Conflict(
            f"claim of retry key {submission.retry_key} kept racing with other transactions",
            fix="retry",
        )
