"""every member's final log (issue 19, item 2): attempt_logs is keyed by (attempt, member);
the rows stored before are member 0's (the only member whose log was kept)

Revision ID: 0017
Revises: 0015
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "attempt_logs", sa.Column("member", sa.Integer(), server_default="0", nullable=False)
    )
    op.create_check_constraint(op.f("ck_attempt_logs_member"), "attempt_logs", "member >= 0")
    op.drop_constraint("pk_attempt_logs", "attempt_logs", type_="primary")
    op.create_primary_key("pk_attempt_logs", "attempt_logs", ["attempt_id", "member"])


def downgrade() -> None:
    op.execute("DELETE FROM attempt_logs WHERE member <> 0")  # one log per attempt again
    op.drop_constraint("pk_attempt_logs", "attempt_logs", type_="primary")
    op.create_primary_key("pk_attempt_logs", "attempt_logs", ["attempt_id"])
    op.drop_constraint(op.f("ck_attempt_logs_member"), "attempt_logs", type_="check")
    op.drop_column("attempt_logs", "member")
