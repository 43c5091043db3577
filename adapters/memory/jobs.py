"""In-memory jobs and their events (twin of adapters/postgres/jobs.py)."""

from __future__ import annotations

import builtins
from collections.abc import Collection

from adapters.memory.db import Tx, compare_and_set
from adapters.paging import check_limit, decode_cursor, encode_cursor
from domain.jobs import Job, JobEvent, JobProgress, search_matches
from domain.lifecycle import JobState
from domain.ports import JobPage


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
        before: Job | None = self._tx.peek("jobs", job.id)  # its state and reason only
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
        search: str | None = None,
    ) -> JobPage:
        check_limit(limit)
        after = decode_cursor(cursor) if cursor is not None else None
        wanted = None if states is None else {JobState(s) for s in states}

        def where(j: Job) -> bool:
            return (
                (owner is None or j.owner == owner)
                and (queue is None or j.spec.queue == queue)
                and (wanted is None or j.state in wanted)
                and (after is None or (j.created_at, j.id) < after)
                and (search is None or search_matches(j, search))
            )

        rows: list[Job] = (
            self._tx.scan("jobs", where)
            if wanted is None
            else self._tx.scan_by("jobs", "state", wanted, where)  # by the state index
        )
        rows.sort(key=lambda j: (j.created_at, j.id), reverse=True)
        page: list[Job] = self._tx.copied("jobs", rows[:limit])  # copy only what is returned
        more = len(rows) > limit
        return JobPage(
            jobs=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )

    async def claim(self, states: Collection[JobState], limit: int) -> builtins.list[Job]:
        check_limit(limit)
        wanted = {JobState(s) for s in states}
        candidates: list[Job] = sorted(
            self._tx.scan_by("jobs", "state", wanted, lambda j: True),  # read again below
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

    async def progress(self, job_ids: Collection[str]) -> dict[str, JobProgress]:
        ids = sorted(set(job_ids))
        check_limit(len(ids) or 1)
        wanted = set(ids)
        tries: dict[str, int] = {}
        for a in self._tx.select("attempts", lambda a: a.job_id in wanted):  # one pass
            tries[a.job_id] = tries.get(a.job_id, 0) + 1
        found: dict[str, JobProgress] = {}
        for job_id in ids:
            events = self._events(job_id)
            if not events:
                continue
            ran = [e.at for e in events if e.state is JobState.RUNNING]
            waited = [e.at for e in events if e.state is JobState.PENDING]
            found[job_id] = JobProgress(
                job_id,
                tries.get(job_id, 0),
                min(ran) if ran else None,
                max(waited) if waited else None,
            )
        return found
