"""retry keys per user: the commit ledger's key becomes (owner, retry_key)

Two users may use the same retry key; each decides only their own commits. Downgrading fails
(unique violation) once two users hold the same key: delete one of the rows first.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint("pk_submissions", "submissions", type_="primary")
    op.create_primary_key("pk_submissions", "submissions", ["owner", "retry_key"])


def downgrade() -> None:
    op.drop_constraint("pk_submissions", "submissions", type_="primary")
    op.create_primary_key("pk_submissions", "submissions", ["retry_key"])
