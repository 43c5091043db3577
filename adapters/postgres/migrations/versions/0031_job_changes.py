"""job changes: ``jobs.changed``, the id of the transaction that last wrote the job, so that the
scheduler reads only the jobs changed since its previous pass (docs/scheduling.md,
"Incremental snapshot").

It is written by the column's default on insert and by a trigger on every update, whatever
path changes the job (commit, cancel, a retry's return to pending, a placement). The scheduler
keeps ``pg_snapshot_xmin`` of the snapshot it last read in: every transaction below it had
ended then, so a job it wrote was seen; anything else has ``changed`` at or above it, and the
next read (``changed >= mark``) returns it. The value is the 64-bit transaction id
(``pg_current_xact_id()``, no wraparound) kept as a bigint.

Revision ID: 0031
Revises: 0029
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0029"
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


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_changed ON jobs")
    op.execute("DROP FUNCTION jobs_changed()")
    op.drop_index("ix_jobs_changed", table_name="jobs")
    op.drop_column("jobs", "changed")
