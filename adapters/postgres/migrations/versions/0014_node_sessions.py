"""node sessions: one live control session per node (closed_at, peer and daemon instance on
node_links) and the security events of refused sessions (node_events)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("node_links", sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("node_links", sa.Column("peer", sa.Text(), server_default="", nullable=False))
    op.add_column(
        "node_links", sa.Column("instance", sa.Text(), server_default="", nullable=False)
    )
    # links of nodes already disconnected are closed (their last heartbeat is the best time)
    op.execute(
        "UPDATE node_links l SET closed_at = l.heartbeat_at FROM nodes n "
        "WHERE n.name = l.node AND n.connectivity <> 'connected'"
    )
    op.create_table(
        "node_events",
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.CheckConstraint("kind IN ('session-refused')", name=op.f("ck_node_events_kind")),
        sa.CheckConstraint("count >= 1", name=op.f("ck_node_events_count")),
        sa.ForeignKeyConstraint(
            ["node"], ["nodes.name"], name=op.f("fk_node_events_node_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node", "kind", "source", name=op.f("pk_node_events")),
    )
    op.create_index("ix_node_events_node_last_at", "node_events", ["node", "last_at"])


def downgrade() -> None:
    op.drop_table("node_events")
    op.drop_column("node_links", "instance")
    op.drop_column("node_links", "peer")
    op.drop_column("node_links", "closed_at")
