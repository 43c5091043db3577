"""output fetches: a request to a node for one file of a member's recorded outputs (a download
of a file kept on the node, docs/capsule.md#on-the-node-backend) rides the ``output_scans``
ledger; ``fetch_path`` NULL is a scan (``tp artifacts verify``), else the file to send, with
the size and SHA-256 its manifest recorded.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | Sequence[str] | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("output_scans", sa.Column("fetch_path", sa.Text(), nullable=True))
    op.add_column("output_scans", sa.Column("fetch_size", sa.BigInteger(), nullable=True))
    op.add_column("output_scans", sa.Column("fetch_sha256", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_output_scans_fetch_whole"),
        "output_scans",
        "(fetch_path IS NULL) = (fetch_size IS NULL) AND (fetch_path IS NULL) ="
        " (fetch_sha256 IS NULL)",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_output_scans_fetch_whole"), "output_scans")
    op.drop_column("output_scans", "fetch_sha256")
    op.drop_column("output_scans", "fetch_size")
    op.drop_column("output_scans", "fetch_path")
