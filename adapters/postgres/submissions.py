"""Previews and the submission ledger."""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import fetch_one, insert_if_new_stmt, insert_new
from adapters.postgres.tables import previews, submissions
from domain.errors import Conflict
from domain.jobs import Submission
from domain.submission import Preview

MAX_CLAIM_ROUNDS = 20
_BY_KEY = select(submissions).where(
    submissions.c.owner == bindparam("owner"), submissions.c.retry_key == bindparam("retry_key")
)


class PostgresPreviewRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, preview: Preview) -> None:
        await insert_new(
            self._conn, previews, codec.preview_values(preview), f"preview {preview.id}"
        )

    async def get(self, preview_id: str) -> Preview | None:
        with translated(f"get preview {preview_id}"):
            row = await fetch_one(self._conn, previews, "id", preview_id)
        return codec.preview_from_row(row) if row else None


class PostgresSubmissionLedger:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def claim(self, submission: Submission) -> Submission | None:
        """INSERT … ON CONFLICT DO NOTHING; on a conflict return the row that holds the owner's
        retry key, else the one that holds the preview. A conflicting transaction that is
        still open makes the INSERT wait for it; if it rolled back, the next round inserts."""
        with translated(f"claim retry key {submission.retry_key}"):
            for _ in range(MAX_CLAIM_ROUNDS):
                values = codec.submission_values(submission)
                inserted = (
                    await self._conn.execute(insert_if_new_stmt(submissions), values)
                ).first()
                if inserted is not None:
                    return None
                row = (
                    await self._conn.execute(
                        _BY_KEY, {"owner": submission.owner, "retry_key": submission.retry_key}
                    )
                ).mappings().first() or await fetch_one(
                    self._conn, submissions, "preview_id", submission.preview_id
                )
                if row is not None:
                    return codec.submission_from_row(row)
                if await fetch_one(self._conn, submissions, "job_id", submission.job_id):
                    raise Conflict(
                        f"job id {submission.job_id} is already recorded for another submission",
                        fix="use a fresh job id",
                    )
        raise Conflict(
            f"claim of retry key {submission.retry_key} kept racing with other transactions",
            fix="retry",
        )
