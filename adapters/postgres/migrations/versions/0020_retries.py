"""retries (issue 22): a job pending again after an attempt ended waits for its backoff
(``jobs.not_before``); an attempt says why it ended (``attempts.cause``: node-lost, preempted,
launch-failed, requeued); a queue may cap its jobs' attempts (``queues.max_attempts``)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    op.add_column("attempts", sa.Column("cause", sa.Text(), server_default="", nullable=False))
    op.add_column("queues", sa.Column("max_attempts", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("queues", "max_attempts")
    op.drop_column("attempts", "cause")
    op.drop_column("jobs", "not_before")
