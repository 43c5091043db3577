"""job changes, and the job timeline recorded per statement: ``jobs.changed``, the id of the transaction that last wrote the job, so that the
scheduler reads only the jobs changed since its previous pass (docs/scheduling.md,
"Incremental snapshot").

It is written by the column's default on insert and by a trigger on every update, whatever
path changes the job (commit, cancel, a retry's return to pending, a placement). The scheduler
keeps ``pg_snapshot_xmin`` of the snapshot it last read in: every transaction below it had
ended then, so a job it wrote was seen; anything else has ``changed`` at or above it, and the
next read (``changed >= mark``) returns it. The value is the 64-bit transaction id
(``pg_current_xact_id()``, no wraparound) kept as a bigint.

The job timeline's trigger (migration 0012) becomes two statement-level triggers with
transition tables: one ``INSERT … SELECT`` records the events of every job a statement moved
(the scheduler moves a pass's jobs in one statement) instead of a PL/pgSQL call and two queries
per job. What they record is unchanged: an insert is event 1, an update that changes the state
is the next event, with the new reason if the update changed it.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

XACT = "(pg_current_xact_id())::text::bigint"

_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.changed := {XACT};
  RETURN NEW;
END
$$
"""

_INSERTED = """
CREATE OR REPLACE FUNCTION record_job_events_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO job_events (job_id, seq, at, state, reason)
  SELECT n.id, 1, n.created_at, n.state, n.reason FROM new_jobs n;
  RETURN NULL;
END
$$
"""
_UPDATED = """
CREATE OR REPLACE FUNCTION record_job_events_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- the UPDATE holds the jobs' row locks: no other transaction computes the same seq
  INSERT INTO job_events (job_id, seq, at, state, reason)
  SELECT n.id,
         coalesce((SELECT max(e.seq) FROM job_events e WHERE e.job_id = n.id), 0) + 1,
         n.updated_at,
         n.state,
         CASE WHEN n.reason IS DISTINCT FROM o.reason THEN n.reason ELSE '' END
  FROM new_jobs n JOIN old_jobs o ON o.id = n.id
  WHERE n.state IS DISTINCT FROM o.state;
  RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("changed", sa.BigInteger(), server_default=sa.text(XACT), nullable=False),
    )
    op.create_index("ix_jobs_changed", "jobs", ["changed"])
    op.execute(_FUNCTION)
    op.execute(
        "CREATE TRIGGER jobs_changed BEFORE UPDATE ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION jobs_changed()"
    )
    op.execute("DROP TRIGGER jobs_record_event ON jobs")
    op.execute(_INSERTED)
    op.execute(_UPDATED)
    op.execute(
        "CREATE TRIGGER jobs_record_events_inserted AFTER INSERT ON jobs "
        "REFERENCING NEW TABLE AS new_jobs "
        "FOR EACH STATEMENT EXECUTE FUNCTION record_job_events_inserted()"
    )
    op.execute(
        "CREATE TRIGGER jobs_record_events_updated AFTER UPDATE ON jobs "
        "REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs "
        "FOR EACH STATEMENT EXECUTE FUNCTION record_job_events_updated()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_record_events_updated ON jobs")
    op.execute("DROP TRIGGER jobs_record_events_inserted ON jobs")
    op.execute("DROP FUNCTION record_job_events_updated()")
    op.execute("DROP FUNCTION record_job_events_inserted()")
    op.execute(
        "CREATE TRIGGER jobs_record_event AFTER INSERT OR UPDATE OF state ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION record_job_event()"
    )
    op.execute("DROP TRIGGER jobs_changed ON jobs")
    op.execute("DROP FUNCTION jobs_changed()")
    op.drop_index("ix_jobs_changed", table_name="jobs")
    op.drop_column("jobs", "changed")
