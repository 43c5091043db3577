"""why a configured pool takes no new work: its backend does not report it (issue 19 item 5: a
Slurm pool whose partition does not exist)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pools", sa.Column("unavailable", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    op.drop_column("pools", "unavailable")
