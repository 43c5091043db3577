"""pool checks: each node's result in its pool's last check, and the checks themselves

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VALIDATIONS = ("unchecked", "passed", "failed")  # frozen at this revision


def upgrade() -> None:
    op.add_column(
        "nodes", sa.Column("validation", sa.Text(), nullable=False, server_default="unchecked")
    )
    op.add_column(
        "nodes", sa.Column("validation_reason", sa.Text(), nullable=False, server_default="")
    )
    listed = ", ".join(f"'{v}'" for v in VALIDATIONS)
    op.create_check_constraint(op.f("ck_nodes_validation"), "nodes", f"validation IN ({listed})")
    op.create_table(
        "pool_checks",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("nodes", JSONB(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("results", JSONB(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_checks")),
        sa.ForeignKeyConstraint(
            ["pool"], ["pools.name"], name=op.f("fk_pool_checks_pool_pools"), ondelete="CASCADE"
        ),
    )
    op.create_index(op.f("ix_pool_checks_pool_started_at"), "pool_checks", ["pool", "started_at"])


def downgrade() -> None:
    op.drop_table("pool_checks")
    op.drop_constraint(op.f("ck_nodes_validation"), "nodes", type_="check")
    op.drop_column("nodes", "validation_reason")
    op.drop_column("nodes", "validation")
