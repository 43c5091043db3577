"""installation id, and the engine a member was prepared on and why its node did not account
for it (issue 18: a member is declared ended only on proof; containers name their installation)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "installation",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_installation")),
    )
    # made here, once: the id lives as long as the database (a restored backup keeps it)
    op.execute(
        sa.text("INSERT INTO installation (id, created_at) VALUES (:id, now())").bindparams(
            id=f"inst-{uuid.uuid4().hex}"
        )
    )
    for column in ("engine", "unaccounted"):
        op.add_column(
            "member_launches", sa.Column(column, sa.Text(), server_default="", nullable=False)
        )


def downgrade() -> None:
    op.drop_column("member_launches", "unaccounted")
    op.drop_column("member_launches", "engine")
    op.drop_table("installation")
