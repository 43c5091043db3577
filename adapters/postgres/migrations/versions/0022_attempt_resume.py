"""what each attempt resumed from (issue 22): the checkpoint, the attempt that wrote it and its
step, and the newer checkpoints skipped because they did not verify (``attempts.resume``, JSON;
null: not recorded, as on a first attempt)

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("resume", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "resume")
