"""job events: the job timeline, one row per state transition, written by a trigger on jobs

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATES = "'pending', 'starting', 'running', 'stopping', 'succeeded', 'failed', 'cancelled'"

_FUNCTION = """
CREATE OR REPLACE FUNCTION record_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO job_events (job_id, seq, at, state, reason)
    VALUES (NEW.id, 1, NEW.created_at, NEW.state, NEW.reason);
  ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
    -- the UPDATE holds the job's row lock: no other transaction computes the same seq
    INSERT INTO job_events (job_id, seq, at, state, reason)
    VALUES (
      NEW.id,
      coalesce((SELECT max(e.seq) FROM job_events e WHERE e.job_id = NEW.id), 0) + 1,
      NEW.updated_at,
      NEW.state,
      CASE WHEN NEW.reason IS DISTINCT FROM OLD.reason THEN NEW.reason ELSE '' END
    );
  END IF;
  RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "job_events",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.CheckConstraint(f"state IN ({_STATES})", name=op.f("ck_job_events_state")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "seq", name=op.f("pk_job_events")),
    )
    op.create_index("ix_jobs_queue_created_at_id", "jobs", ["queue", "created_at", "id"])
    # jobs from before the timeline: one event, their state as last recorded
    op.execute(
        "INSERT INTO job_events (job_id, seq, at, state, reason) "
        "SELECT id, 1, updated_at, state, reason FROM jobs"
    )
    op.execute(_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_record_event AFTER INSERT OR UPDATE OF state ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION record_job_event()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_record_event ON jobs")
    op.execute("DROP FUNCTION record_job_event()")
    op.drop_index("ix_jobs_queue_created_at_id", table_name="jobs")
    op.drop_table("job_events")
