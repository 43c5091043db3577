"""initial schema: previews, submissions, jobs, attempts, members, attempt_logs, api_tokens

Revision ID: 0001
Revises:
Create Date: 2024-12-01
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the enum values at this revision (a later enum change needs a migration).
JOB_STATES = ("pending", "starting", "running", "stopping", "succeeded", "failed", "cancelled")
ATTEMPT_STATES = ("launching", "running", "stopping", "succeeded", "failed", "cancelled")
MEMBER_STATES = (
    "pending", "starting", "running", "unknown", "succeeded", "failed", "stopped",
)
ROLES = ("admin", "operator", "member", "viewer")


def one_of(table: str, column: str, values: Sequence[str]) -> sa.CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    # op.f(): the name is final, not run through the naming convention again
    return sa.CheckConstraint(f"{column} IN ({listed})", name=op.f(f"ck_{table}_{column}"))


def ts(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "previews",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        ts("created_at"),
        ts("expires_at"),
        sa.Column("intent", JSONB(), nullable=False),
        sa.Column("spec", JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_previews"),
    )
    op.create_table(
        "submissions",
        sa.Column("retry_key", sa.Text(), nullable=False),
        sa.Column("preview_id", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        ts("created_at"),
        sa.PrimaryKeyConstraint("retry_key", name="pk_submissions"),
        sa.UniqueConstraint("preview_id", name="uq_submissions_preview_id"),
        sa.UniqueConstraint("job_id", name="uq_submissions_job_id"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("preview_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("spec", JSONB(), nullable=False),
        ts("created_at"),
        ts("updated_at"),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("preview_id", name="uq_jobs_preview_id"),
        one_of("jobs", "state", JOB_STATES),
    )
    op.create_index("ix_jobs_created_at_id", "jobs", ["created_at", "id"])
    op.create_index("ix_jobs_owner_created_at_id", "jobs", ["owner", "created_at", "id"])
    op.create_index("ix_jobs_state_created_at_id", "jobs", ["state", "created_at", "id"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        ts("created_at"),
        ts("updated_at"),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_attempts_job_id_jobs", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("job_id", "number", name="uq_attempts_job_id_number"),
        one_of("attempts", "state", ATTEMPT_STATES),
    )
    op.create_table(
        "members",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("handle", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_members"),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name="fk_members_attempt_id_attempts",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("attempt_id", "index", name="uq_members_attempt_id_index"),
        one_of("members", "state", MEMBER_STATES),
    )
    op.create_table(
        "attempt_logs",
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column(
            "saved_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("attempt_id", name="pk_attempt_logs"),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name="fk_attempt_logs_attempt_id_attempts",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        ts("created_at"),
        sa.Column("revoked", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
        one_of("api_tokens", "role", ROLES),
    )


def downgrade() -> None:
    for table in ("api_tokens", "attempt_logs", "members", "attempts", "jobs", "submissions",
                  "previews"):
        op.drop_table(table)
