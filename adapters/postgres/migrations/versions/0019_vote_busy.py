"""a member's no vote for a passing condition of its node (a port or GPU still held, its journal
not yet reconciled): the launch is aborted and the job queued again instead of failed

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "member_launches",
        sa.Column("vote_busy", sa.Boolean(), server_default="false", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("member_launches", "vote_busy")
