"""the GPUs a node daemon detected (issue 23): ``node_links.gpu_inventory``, as its latest
control stream reported them (NVML, nvidia-smi or a recording); NULL: none, or a daemon older
than the inventory (unknown)

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("node_links", sa.Column("gpu_inventory", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("node_links", "gpu_inventory")
