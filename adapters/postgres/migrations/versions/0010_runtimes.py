"""runtimes: the runtime registry (images pinned by digest, with their contract)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtimes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("image", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("python", sa.Text(), nullable=True),
        sa.Column("frameworks", postgresql.JSONB(astext_type=sa.Text()), nullable=False,
                  server_default=sa.text("'{}'::jsonb")),
        sa.Column("process_model", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("added_by", sa.Text(), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "process_model IN ('single-process', 'torch-process-group', 'ray', 'cpu')",
            name=op.f("ck_runtimes_process_model"),
        ),
        sa.CheckConstraint("digest ~ '^sha256:[0-9a-f]{64}$'", name=op.f("ck_runtimes_digest")),
        sa.CheckConstraint("revision >= 1", name=op.f("ck_runtimes_revision")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_runtimes")),
    )


def downgrade() -> None:
    op.drop_table("runtimes")
