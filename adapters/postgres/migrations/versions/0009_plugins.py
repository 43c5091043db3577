"""plugins: published plugin versions (name, version), their declaration and file manifest

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GROUPS = "'algorithm', 'data-prep', 'evaluation', 'reward', 'export'"
EXECUTES = "'control-plane', 'node', 'workload'"
DISABLED_TOGETHER = (
    "(disabled_at IS NULL AND disabled_by IS NULL AND disabled_reason IS NULL) OR "
    "(disabled_at IS NOT NULL AND disabled_by IS NOT NULL AND disabled_reason IS NOT NULL)"
)


def upgrade() -> None:
    op.create_table(
        "plugins",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("group", sa.Text(), nullable=False),
        sa.Column("executes", sa.Text(), nullable=False),
        sa.Column("capabilities", postgresql.JSONB(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("declaration", postgresql.JSONB(), nullable=False),
        sa.Column("manifest", postgresql.JSONB(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("blob", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("published_by", sa.Text(), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_by", sa.Text(), nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.CheckConstraint(f'"group" IN ({GROUPS})', name=op.f("ck_plugins_group")),
        sa.CheckConstraint(f"executes IN ({EXECUTES})", name=op.f("ck_plugins_executes")),
        sa.CheckConstraint("size >= 0", name=op.f("ck_plugins_size")),
        sa.CheckConstraint(DISABLED_TOGETHER, name=op.f("ck_plugins_disabled")),
        sa.PrimaryKeyConstraint("name", "version", name=op.f("pk_plugins")),
    )


def downgrade() -> None:
    op.drop_table("plugins")
