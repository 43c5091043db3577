"""checkpoints kept in place (issue 22, Slurm's shared directory): ``kept_in`` names the
checkpoint's directory; such a checkpoint's manifest names no blobs (blob collection ignores it)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("checkpoints", sa.Column("kept_in", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("checkpoints", "kept_in")
