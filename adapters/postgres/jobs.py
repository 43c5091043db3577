"""Jobs: compare-and-set updates, keyset pagination, SKIP LOCKED claims, the timeline.

Job events are written by the ``jobs_record_event`` trigger (migration 0012) in the statement
that inserts or moves a job, so no path that changes a job's state can skip its event."""

from __future__ import annotations

import builtins
from collections.abc import Collection

from sqlalchemy import Select, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.paging import check_limit, decode_cursor, encode_cursor
from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.rows import compare_and_set, fetch_one, insert_new
from adapters.postgres.tables import attempts, jobs
from adapters.postgres.timeline_tables import job_events
from domain.jobs import Job, JobEvent, JobProgress, search_pattern
from domain.lifecycle import JobState
from domain.ports import JobPage


class PostgresJobRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add(self, job: Job) -> None:
        await insert_new(self._conn, jobs, codec.job_values(job), f"job {job.id}")

    async def get(self, job_id: str) -> Job | None:
        with translated(f"get job {job_id}"):
            row = await fetch_one(self._conn, jobs, "id", job_id)
        return codec.job_from_row(row) if row else None

    async def update(self, job: Job, expected: JobState) -> None:
        await compare_and_set(self._conn, jobs, "job", codec.job_values(job), expected.value)

    async def list(
        self,
        *,
        owner: str | None,
        states: Collection[JobState] | None,
        limit: int,
        cursor: str | None,
        queue: str | None = None,
        search: str | None = None,
    ) -> JobPage:
        check_limit(limit)
        query: Select[tuple[object, ...]] = select(jobs)
        if search is not None:
            pattern = search_pattern(search)
            query = query.where(
                or_(  # "C": ASCII letters fold, whatever the database's locale
                    *(
                        c.collate("C").ilike(pattern, escape="\\")
                        for c in (jobs.c.spec["experiment"].astext, jobs.c.id, jobs.c.owner)
                    )
                )
            )
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        if states is not None:
            query = query.where(jobs.c.state.in_([s.value for s in states]))
        if cursor is not None:
            at, job_id = decode_cursor(cursor)
            query = query.where(tuple_(jobs.c.created_at, jobs.c.id) < tuple_(at, job_id))
        query = query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit + 1)
        with translated("list jobs"):
            rows = (await self._conn.execute(query)).mappings().all()
        page = [codec.job_from_row(r) for r in rows[:limit]]
        more = len(rows) > limit
        return JobPage(
            jobs=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )

    async def events(self, job_id: str, limit: int) -> builtins.list[JobEvent]:
        check_limit(limit)
        query = (
            select(job_events)
            .where(job_events.c.job_id == job_id)
            .order_by(job_events.c.seq)
            .limit(limit)
        )
        with translated(f"read the events of job {job_id}"):
            rows = (await self._conn.execute(query)).mappings().all()
        return [
            JobEvent(r["job_id"], r["seq"], r["at"], JobState(r["state"]), r["reason"])
            for r in rows
        ]

    async def claim(self, states: Collection[JobState], limit: int) -> builtins.list[Job]:
        check_limit(limit)
        query = (
            select(jobs)
            .where(jobs.c.state.in_([s.value for s in states]))
            .order_by(jobs.c.created_at, jobs.c.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        with translated("claim jobs"):
            rows = (await self._conn.execute(query)).mappings().all()
        return [codec.job_from_row(r) for r in rows]

    async def progress(self, job_ids: Collection[str]) -> dict[str, JobProgress]:
        ids = sorted(set(job_ids))
        check_limit(len(ids) or 1)
        if not ids:
            return {}
        counted = (
            select(attempts.c.job_id, func.count().label("n"))
            .where(attempts.c.job_id.in_(ids))
            .group_by(attempts.c.job_id)
        )
        timed = (
            select(
                job_events.c.job_id,
                func.min(job_events.c.at)
                .filter(job_events.c.state == JobState.RUNNING.value)
                .label("started_at"),
                func.max(job_events.c.at)
                .filter(job_events.c.state == JobState.PENDING.value)
                .label("pending_since"),
            )
            .where(job_events.c.job_id.in_(ids))
            .group_by(job_events.c.job_id)
        )
        with translated("read the progress of jobs"):
            counts = {r.job_id: r.n for r in await self._conn.execute(counted)}
            times = (await self._conn.execute(timed)).all()
        return {
            r.job_id: JobProgress(r.job_id, counts.get(r.job_id, 0), r.started_at, r.pending_since)
            for r in times
        }
