"""In-memory previews and the commit ledger (twin of adapters/postgres/submissions.py)."""

from __future__ import annotations

from adapters.memory.db import Tx
from domain.errors import Conflict
from domain.jobs import Submission
from domain.submission import Preview


class MemoryPreviewRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, preview: Preview) -> None:
        await self._tx.insert("previews", preview, f"preview {preview.id}")

    async def get(self, preview_id: str) -> Preview | None:
        found: Preview | None = self._tx.get("previews", preview_id)
        return found


class MemorySubmissionLedger:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def claim(self, submission: Submission) -> Submission | None:
        tx = self._tx
        for key, value in (
            ("pk", (submission.owner, submission.retry_key)),  # a retry key is its owner's
            ("preview_id", submission.preview_id),
        ):
            await tx.lock(("submissions", key, value))  # waits for an open claimant
            found: Submission | None = tx.find("submissions", key, value)
            if found is not None:
                return found
        await tx.lock(("submissions", "job_id", submission.job_id))
        if tx.find("submissions", "job_id", submission.job_id) is not None:
            raise Conflict(
                f"job id {submission.job_id} is already recorded for another submission",
                fix="use a fresh job id",
            )
        tx.write("submissions", submission)
        return None
