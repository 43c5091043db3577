"""The repositories of domain.ports over one in-memory transaction (see adapters.memory.db)."""

from __future__ import annotations

import builtins
from collections.abc import Collection
from typing import Any

from adapters.memory.db import Tx
from adapters.memory.store import LivePiece, LogRow
from adapters.paging import check_limit, decode_cursor, encode_cursor
from domain.auth import ApiToken
from domain.errors import Conflict, NotFound
from domain.jobs import Attempt, Job, JobEvent, Member, Submission
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.ports import JobPage
from domain.submission import Preview


async def compare_and_set(tx: Tx, table: str, what: str, row: Any, expected: str) -> None:
    """As UPDATE … WHERE id = … AND state = expected: an invisible row is NotFound; a row
    another transaction is changing is waited for, then re-checked."""
    if tx.get(table, row.id) is None:
        raise NotFound(f"{what} {row.id} does not exist", fix=f"check the {what} id")
    await tx.lock((table, "pk", row.id))
    current = tx.get(table, row.id)
    if current is None:  # pragma: no cover - rows are never deleted
        raise NotFound(f"{what} {row.id} does not exist", fix=f"check the {what} id")
    if current.state != expected:
        raise Conflict(
            f"{what} {row.id} is {current.state}, not {expected}: another writer changed it",
            fix=f"re-read the {what} and decide again",
        )
    tx.write(table, row)


def _require(tx: Tx, table: str, pk: str, what: str) -> None:
    """The foreign-key check: the parent must be visible to this transaction."""
    if tx.get(table, pk) is None:
        raise NotFound(f"{what} {pk} does not exist", fix=f"create the {what} first")


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


class MemoryJobRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, job: Job) -> None:
        await self._tx.insert("jobs", job, f"job {job.id}")
        self._tx.write("job_events", JobEvent(job.id, 1, job.created_at, job.state, job.reason))

    async def get(self, job_id: str) -> Job | None:
        found: Job | None = self._tx.get("jobs", job_id)
        return found

    async def update(self, job: Job, expected: JobState) -> None:
        before: Job | None = self._tx.get("jobs", job.id)
        await compare_and_set(self._tx, "jobs", "job", job, expected.value)
        if before is not None and before.state != job.state:  # as the trigger in postgres
            seq = len(self._events(job.id)) + 1
            reason = job.reason if job.reason != before.reason else ""
            self._tx.write("job_events", JobEvent(job.id, seq, job.updated_at, job.state, reason))

    def _events(self, job_id: str) -> builtins.list[JobEvent]:
        """By key, 1, 2, … (a job has few): no scan of every job's events."""
        found: builtins.list[JobEvent] = []
        while (event := self._tx.get("job_events", (job_id, len(found) + 1))) is not None:
            found.append(event)
        return found

    async def events(self, job_id: str, limit: int) -> builtins.list[JobEvent]:
        check_limit(limit)
        return self._events(job_id)[:limit]

    async def list(
        self,
        *,
        owner: str | None,
        states: Collection[JobState] | None,
        limit: int,
        cursor: str | None,
        queue: str | None = None,
    ) -> JobPage:
        check_limit(limit)
        after = decode_cursor(cursor) if cursor is not None else None
        wanted = None if states is None else {JobState(s) for s in states}
        rows: list[Job] = self._tx.select(
            "jobs",
            lambda j: (
                (owner is None or j.owner == owner)
                and (queue is None or j.spec.queue == queue)
                and (wanted is None or j.state in wanted)
                and (after is None or (j.created_at, j.id) < after)
            ),
        )
        rows.sort(key=lambda j: (j.created_at, j.id), reverse=True)
        page = rows[:limit]
        more = len(rows) > limit
        return JobPage(
            jobs=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )

    async def claim(self, states: Collection[JobState], limit: int) -> builtins.list[Job]:
        check_limit(limit)
        wanted = {JobState(s) for s in states}
        candidates: list[Job] = sorted(
            self._tx.select("jobs", lambda j: j.state in wanted),
            key=lambda j: (j.created_at, j.id),
        )
        claimed: builtins.list[Job] = []
        for job in candidates:
            if len(claimed) == limit:
                break
            if self._tx.try_lock(("jobs", "pk", job.id)):  # SKIP LOCKED
                current = self._tx.get("jobs", job.id)
                if current is not None and current.state in wanted:
                    claimed.append(current)
        return claimed


class MemoryAttemptRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, attempt: Attempt) -> None:
        _require(self._tx, "jobs", attempt.job_id, "job")
        what = f"attempt {attempt.id} (job {attempt.job_id}, number {attempt.number})"
        await self._tx.insert("attempts", attempt, what)

    async def get(self, attempt_id: str) -> Attempt | None:
        found: Attempt | None = self._tx.get("attempts", attempt_id)
        return found

    async def update(self, attempt: Attempt, expected: AttemptState) -> None:
        await compare_and_set(self._tx, "attempts", "attempt", attempt, expected.value)

    async def for_job(self, job_id: str) -> list[Attempt]:
        # numbers are 1, 2, … per job: probe the unique (job, number) index, no table scan
        rows: list[Attempt] = []
        while (a := self._tx.find("attempts", "number", (job_id, len(rows) + 1))) is not None:
            rows.append(a)
        return rows


class MemoryMemberRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, member: Member) -> None:
        _require(self._tx, "attempts", member.attempt_id, "attempt")
        what = f"member {member.id} (attempt {member.attempt_id}, index {member.index})"
        await self._tx.insert("members", member, what)

    async def update(self, member: Member, expected: MemberState) -> None:
        await compare_and_set(self._tx, "members", "member", member, expected.value)

    async def for_attempt(self, attempt_id: str) -> list[Member]:
        # indexes are 0, 1, … per attempt: probe the unique (attempt, index) key, no scan
        rows: list[Member] = []
        while (m := self._tx.find("members", "index", (attempt_id, len(rows)))) is not None:
            rows.append(m)
        return rows

    async def get(self, member_id: str) -> Member | None:
        found: Member | None = self._tx.get("members", member_id)
        return found


class MemoryLogRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def save(self, attempt_id: str, member: int, data: bytes, truncated: bool) -> None:
        _require(self._tx, "attempts", attempt_id, "attempt")
        key = (attempt_id, member)
        await self._tx.lock(("attempt_logs", "pk", key))  # as INSERT … ON CONFLICT
        self._tx.write("attempt_logs", LogRow(attempt_id, member, bytes(data), bool(truncated)))

    async def get(self, attempt_id: str, member: int) -> tuple[bytes, bool] | None:
        row: LogRow | None = self._tx.get("attempt_logs", (attempt_id, member))
        return (row.data, row.truncated) if row else None

    async def append_live(self, member_id: str, offset: int, data: bytes, limit: int) -> bool:
        if offset >= limit or not data:
            return False
        _require(self._tx, "members", member_id, "member")
        await self._tx.lock(("member_logs", "pk", (member_id, offset)))
        if self._tx.get("member_logs", (member_id, offset)) is not None:
            return False
        self._tx.write("member_logs", LivePiece(member_id, offset, bytes(data[: limit - offset])))
        return True

    async def live(self, member_id: str, offset: int) -> list[tuple[int, bytes]]:
        rows: list[LivePiece] = self._tx.select(
            "member_logs",
            lambda r: r.member_id == member_id and r.offset + len(r.data) > offset,
        )
        return [(r.offset, r.data) for r in sorted(rows, key=lambda r: r.offset)]


class MemoryTokenRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, token: ApiToken) -> None:
        _require(self._tx, "users", token.name, "user")
        await self._tx.insert("api_tokens", token, f"token {token.id}")

    async def by_hash(self, token_hash: str) -> ApiToken | None:
        found: ApiToken | None = self._tx.find("api_tokens", "token_hash", token_hash)
        return found

    async def count(self) -> int:
        return self._tx.count("api_tokens")
