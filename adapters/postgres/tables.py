"""The schema, as SQLAlchemy Core tables. Migrations must produce exactly this (a test checks).

Idempotency lives in constraints: ``submissions`` has one row per retry key (primary key), per
preview (``uq_submissions_preview_id``) and per job (``uq_submissions_job_id``), and ``jobs``
one row per preview (``uq_jobs_preview_id``).
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB

from domain.auth import Role
from domain.lifecycle import AttemptState, JobState, MemberState

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)


def one_of(column: str, values: type[StrEnum]) -> CheckConstraint:
    """``CHECK (column IN (...))`` over an enum's values, named ``ck_<table>_<column>``."""
    listed = ", ".join(f"'{v.value}'" for v in values)
    return CheckConstraint(f"{column} IN ({listed})", name=column)


def ts(name: str, nullable: bool = False) -> Column[object]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


previews = Table(
    "previews",
    metadata,
    Column("id", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("digest", Text, nullable=False),
    ts("created_at"),
    ts("expires_at"),
    Column("intent", JSONB, nullable=False),
    Column("spec", JSONB, nullable=False),
)

submissions = Table(
    "submissions",
    metadata,
    Column("retry_key", Text, primary_key=True),
    Column("preview_id", Text, nullable=False, unique=True),
    Column("digest", Text, nullable=False),
    Column("job_id", Text, nullable=False, unique=True),
    Column("owner", Text, nullable=False),
    ts("created_at"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("preview_id", Text, nullable=False, unique=True),
    Column("owner", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("spec", JSONB, nullable=False),
    ts("created_at"),
    ts("updated_at"),
    Column("reason", Text, nullable=False, server_default=""),
    Column("exit_code", Integer, nullable=True),
    one_of("state", JobState),
    Index("ix_jobs_created_at_id", "created_at", "id"),
    Index("ix_jobs_owner_created_at_id", "owner", "created_at", "id"),
    Index("ix_jobs_state_created_at_id", "state", "created_at", "id"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Text, primary_key=True),
    Column("job_id", Text, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", Text, nullable=False),
    ts("created_at"),
    ts("updated_at"),
    Column("reason", Text, nullable=False, server_default=""),
    Column("exit_code", Integer, nullable=True),
    UniqueConstraint("job_id", "number"),
    one_of("state", AttemptState),
)

members = Table(
    "members",
    metadata,
    Column("id", Text, primary_key=True),
    Column("attempt_id", Text, ForeignKey("attempts.id", ondelete="CASCADE"), nullable=False),
    Column("index", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("handle", Text, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=False, server_default=""),
    ts("updated_at"),
    UniqueConstraint("attempt_id", "index"),
    one_of("state", MemberState),
)

attempt_logs = Table(
    "attempt_logs",
    metadata,
    Column(
        "attempt_id",
        Text,
        ForeignKey("attempts.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("data", LargeBinary, nullable=False),
    Column("truncated", Boolean, nullable=False),
    Column("saved_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("token_hash", Text, nullable=False, unique=True),
    ts("created_at"),
    Column("revoked", Boolean, nullable=False, server_default="false"),
    one_of("role", Role),
)
