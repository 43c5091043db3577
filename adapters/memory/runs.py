"""In-memory attempts, members and their logs (twin of adapters/postgres/runs.py)."""

from __future__ import annotations

from dataclasses import replace

from adapters.memory.db import Tx, compare_and_set, require
from adapters.memory.store import LivePiece, LogRow
from domain.checkpoints import Resume
from domain.errors import NotFound
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, MemberState


def _resume_kept(current: Attempt, row: Attempt) -> Attempt:
    """``update`` leaves ``resume`` as it is (only ``note_resume`` writes it), as in Postgres."""
    return replace(row, resume=current.resume)


class MemoryAttemptRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add(self, attempt: Attempt) -> None:
        require(self._tx, "jobs", attempt.job_id, "job")
        what = f"attempt {attempt.id} (job {attempt.job_id}, number {attempt.number})"
        await self._tx.insert("attempts", attempt, what)

    async def get(self, attempt_id: str) -> Attempt | None:
        found: Attempt | None = self._tx.get("attempts", attempt_id)
        return found

    async def update(self, attempt: Attempt, expected: AttemptState) -> None:
        await compare_and_set(
            self._tx, "attempts", "attempt", attempt, expected.value, _resume_kept
        )

    async def note_resume(self, attempt_id: str, resume: Resume) -> None:
        current = await self.get(attempt_id)
        if current is None:
            raise NotFound(f"attempt {attempt_id} does not exist", fix="check the attempt id")

        def noted(now: Attempt, _: Attempt) -> Attempt:
            return replace(now, resume=resume)

        await compare_and_set(self._tx, "attempts", "attempt", current, None, noted)

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
        require(self._tx, "attempts", member.attempt_id, "attempt")
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
        require(self._tx, "attempts", attempt_id, "attempt")
        key = (attempt_id, member)
        await self._tx.lock(("attempt_logs", "pk", key))  # as INSERT … ON CONFLICT
        self._tx.write("attempt_logs", LogRow(attempt_id, member, bytes(data), bool(truncated)))

    async def get(self, attempt_id: str, member: int) -> tuple[bytes, bool] | None:
        row: LogRow | None = self._tx.get("attempt_logs", (attempt_id, member))
        return (row.data, row.truncated) if row else None

    async def append_live(self, member_id: str, offset: int, data: bytes, limit: int) -> bool:
        if offset >= limit or not data:
            return False
        require(self._tx, "members", member_id, "member")
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
