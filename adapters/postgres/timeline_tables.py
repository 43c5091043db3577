"""The job timeline schema (part of ``tables.metadata``, migration 0012): one row per job state
transition, written by the ``jobs_record_event`` trigger in the transaction that moved the job,
whatever statement moved it (the repository's compare-and-set, the scheduler's batch start)."""

from __future__ import annotations

from sqlalchemy import Column, Integer, Table, Text

from adapters.postgres.tables import metadata, one_of, ts
from domain.lifecycle import JobState

job_events = Table(
    "job_events",
    metadata,
    # → jobs.id ON DELETE CASCADE, kept by statement triggers (migration 0036)
    Column("job_id", Text, primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),  # 1, 2, … per job
    ts("at"),  # the job's updated_at (created_at for the first event)
    Column("state", Text, nullable=False),  # the state entered
    Column("reason", Text, nullable=False, server_default=""),  # when the move set a new one
    one_of("state", JobState),
)
