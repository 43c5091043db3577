"""Attempts, members and their final logs."""

from __future__ import annotations

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import compare_and_set, fetch_one, insert_new
from adapters.postgres.tables import attempt_logs, attempts, members
from domain.checkpoints import Resume
from domain.errors import NotFound
from domain.jobs import Attempt, Member
from domain.lifecycle import AttemptState, MemberState


class PostgresAttemptRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, attempt: Attempt) -> None:
        what = f"attempt {attempt.id} (job {attempt.job_id}, number {attempt.number})"
        resume = attempt.resume.to_dict() if attempt.resume is not None else None
        values = codec.attempt_values(attempt) | {"resume": resume}
        await insert_new(self._conn, attempts, values, what)

    async def get(self, attempt_id: str) -> Attempt | None:
        with translated(f"get attempt {attempt_id}"):
            row = (
                (await self._conn.execute(select(attempts).where(attempts.c.id == attempt_id)))
                .mappings()
                .first()
            )
        return codec.attempt_from_row(row) if row else None

    async def update(self, attempt: Attempt, expected: AttemptState) -> None:
        await compare_and_set(
            self._conn, attempts, "attempt", codec.attempt_values(attempt), expected.value
        )

    async def note_resume(self, attempt_id: str, resume: Resume) -> None:
        query = (
            update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(resume=resume.to_dict())
            .returning(attempts.c.id)
        )
        with translated(f"note what attempt {attempt_id} resumed from"):
            done = (await self._conn.execute(query)).first()
        if done is None:
            raise NotFound(f"attempt {attempt_id} does not exist", fix="check the attempt id")

    async def for_job(self, job_id: str) -> list[Attempt]:
        query = select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.number)
        with translated(f"list attempts of job {job_id}"):
            rows = (await self._conn.execute(query)).mappings().all()
        return [codec.attempt_from_row(r) for r in rows]


class PostgresMemberRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, member: Member) -> None:
        what = f"member {member.id} (attempt {member.attempt_id}, index {member.index})"
        await insert_new(self._conn, members, codec.member_values(member), what)

    async def update(self, member: Member, expected: MemberState) -> None:
        await compare_and_set(
            self._conn, members, "member", codec.member_values(member), expected.value
        )

    async def for_attempt(self, attempt_id: str) -> list[Member]:
        query = select(members).where(members.c.attempt_id == attempt_id).order_by(members.c.index)
        with translated(f"list members of attempt {attempt_id}"):
            rows = (await self._conn.execute(query)).mappings().all()
        return [codec.member_from_row(r) for r in rows]

    async def get(self, member_id: str) -> Member | None:
        with translated(f"get member {member_id}"):
            row = await fetch_one(self._conn, members, "id", member_id)
        return codec.member_from_row(row) if row else None


class PostgresLogRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def save(self, attempt_id: str, member: int, data: bytes, truncated: bool) -> None:
        values = {"attempt_id": attempt_id, "member": member, "data": data, "truncated": truncated}
        stmt = pg_insert(attempt_logs).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[attempt_logs.c.attempt_id, attempt_logs.c.member],
            set_={
                "data": stmt.excluded.data,
                "truncated": stmt.excluded.truncated,
                "saved_at": func.now(),
            },
        )
        with translated(f"save the log of member {member} of attempt {attempt_id}"):
            await self._conn.execute(stmt)

    async def get(self, attempt_id: str, member: int) -> tuple[bytes, bool] | None:
        query = select(attempt_logs.c.data, attempt_logs.c.truncated).where(
            attempt_logs.c.attempt_id == attempt_id, attempt_logs.c.member == member
        )
        with translated(f"get the log of member {member} of attempt {attempt_id}"):
            row = (await self._conn.execute(query)).first()
        return (bytes(row.data), bool(row.truncated)) if row else None

    async def append_live(self, member_id: str, offset: int, data: bytes, limit: int) -> bool:
        if offset >= limit or not data:
            return False
        params = {"member_id": member_id, "offset": offset, "data": data[: limit - offset]}
        with translated(f"store live output of member {member_id}"):
            return (await self._conn.execute(_APPEND_LIVE, params)).first() is not None

    async def live(self, member_id: str, offset: int) -> list[tuple[int, bytes]]:
        params = {"member_id": member_id, "offset": offset}
        with translated(f"read live output of member {member_id}"):
            rows = (await self._conn.execute(_LIVE, params)).all()
        return [(int(r[0]), bytes(r[1])) for r in rows]


_APPEND_LIVE = text(
    'INSERT INTO member_logs (member_id, "offset", data) VALUES (:member_id, :offset, :data) '
    "ON CONFLICT DO NOTHING RETURNING member_id"
)
_LIVE = text(
    'SELECT "offset", data FROM member_logs WHERE member_id = :member_id '
    'AND "offset" + length(data) > :offset ORDER BY "offset"'
)
