"""tokens that can be managed (issue 24): ``api_tokens`` gains a label, an expiry, the time of
its last use (written at most once a minute) and who revoked it when; ``revoked`` (a flag no
code ever set) becomes ``revoked_at``/``revoked_by``. Tokens made before keep working: no
label, no expiry, never used.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=True)


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("label", sa.Text(), nullable=False, server_default=""))
    op.add_column("api_tokens", _ts("expires_at"))
    op.add_column("api_tokens", _ts("last_used_at"))
    op.add_column("api_tokens", _ts("revoked_at"))
    op.add_column("api_tokens", sa.Column("revoked_by", sa.Text(), nullable=True))
    # a token flagged revoked before stays revoked (when, and by whom, was never recorded)
    op.execute("UPDATE api_tokens SET revoked_at = now() WHERE revoked")
    op.drop_column("api_tokens", "revoked")
    op.create_index("ix_api_tokens_name", "api_tokens", ["name"])


def downgrade() -> None:
    op.drop_index("ix_api_tokens_name", "api_tokens")
    op.add_column(
        "api_tokens", sa.Column("revoked", sa.Boolean(), nullable=False, server_default="false")
    )
    # 0024's code cannot expire a token: one with an expiry is revoked rather than made eternal
    op.execute(
        "UPDATE api_tokens SET revoked = true WHERE revoked_at IS NOT NULL OR expires_at IS NOT NULL"
    )
    for column in ("revoked_by", "revoked_at", "last_used_at", "expires_at", "label"):
        op.drop_column("api_tokens", column)
