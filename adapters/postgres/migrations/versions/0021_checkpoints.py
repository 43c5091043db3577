"""checkpoints that carry across attempts (issue 22): each complete checkpoint of an attempt,
its files kept as blobs named in its manifest (which keeps them from blob collection)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("job_id", sa.Text(), sa.ForeignKey("jobs.id", ondelete="CASCADE")),
        sa.Column("attempt", sa.Integer()),
        sa.Column("name", sa.Text()),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("manifest", JSONB(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt", "name"),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
