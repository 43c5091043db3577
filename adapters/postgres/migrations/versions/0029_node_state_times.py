"""node state times: when a node's scheduling state and its connectivity last changed
(``nodes.sched_changed_at``, ``nodes.connectivity_changed_at``), and the last changes of its
connectivity (``node_connectivity``, at most 50 per node), for the Fleet page
(docs/console.md#fleet, docs/http-api.md#node-state-times).

Both are written by triggers on ``nodes`` in the statement that changes the node, so every
path that moves a node (cordon, drain, uncordon, a session's open and close, a revive, an
expiry, a node declared lost, `tp fleet apply`) keeps them true without its own code. The time
is the row's new ``updated_at`` (every such statement sets it). Existing nodes start with their
``updated_at`` and one history row for their current connectivity.

Revision ID: 0029
Revises: 0027
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEEP = 50  # connectivity changes kept per node (domain.fleet.CONNECTIVITY_KEPT)

_TIMES = """
CREATE OR REPLACE FUNCTION node_state_times() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  at timestamptz := NEW.updated_at;
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
    at := now();  -- a statement that did not set updated_at (none does today)
  END IF;
  IF TG_OP = 'INSERT' THEN
    NEW.sched_changed_at := at;
    NEW.connectivity_changed_at := at;
  ELSE
    IF NEW.sched IS DISTINCT FROM OLD.sched THEN NEW.sched_changed_at := at; END IF;
    IF NEW.connectivity IS DISTINCT FROM OLD.connectivity THEN
      NEW.connectivity_changed_at := at;
    END IF;
  END IF;
  RETURN NEW;
END $$;
"""
_HISTORY = f"""
CREATE OR REPLACE FUNCTION node_connectivity_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.connectivity IS DISTINCT FROM OLD.connectivity THEN
    INSERT INTO node_connectivity (node, at, connectivity)
    VALUES (NEW.name, NEW.connectivity_changed_at, NEW.connectivity);
    DELETE FROM node_connectivity WHERE node = NEW.name AND seq <= (
      SELECT seq FROM node_connectivity WHERE node = NEW.name
      ORDER BY seq DESC OFFSET {KEEP} LIMIT 1);
  END IF;
  RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.add_column("nodes", sa.Column("sched_changed_at", sa.DateTime(timezone=True)))
    op.add_column("nodes", sa.Column("connectivity_changed_at", sa.DateTime(timezone=True)))
    op.create_table(
        "node_connectivity",
        sa.Column("seq", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column(
            "node", sa.Text(), sa.ForeignKey("nodes.name", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("connectivity", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "connectivity IN ('connected', 'disconnected', 'lost')",
            name=op.f("ck_node_connectivity_connectivity"),
        ),
    )
    op.create_index("ix_node_connectivity_node_seq", "node_connectivity", ["node", "seq"])
    op.execute(
        "UPDATE nodes SET sched_changed_at = updated_at, connectivity_changed_at = updated_at"
    )
    op.execute(
        "INSERT INTO node_connectivity (node, at, connectivity) "
        "SELECT name, updated_at, connectivity FROM nodes ORDER BY name"
    )
    op.execute(_TIMES)
    op.execute(_HISTORY)
    op.execute(
        "CREATE TRIGGER nodes_state_times BEFORE INSERT OR UPDATE OF sched, connectivity "
        "ON nodes "
        "FOR EACH ROW EXECUTE FUNCTION node_state_times()"
    )
    op.execute(
        "CREATE TRIGGER nodes_connectivity_history AFTER INSERT OR UPDATE OF connectivity "
        "ON nodes FOR EACH ROW EXECUTE FUNCTION node_connectivity_history()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER nodes_connectivity_history ON nodes")
    op.execute("DROP TRIGGER nodes_state_times ON nodes")
    op.execute("DROP FUNCTION node_connectivity_history()")
    op.execute("DROP FUNCTION node_state_times()")
    op.drop_index("ix_node_connectivity_node_seq", table_name="node_connectivity")
    op.drop_table("node_connectivity")
    op.drop_column("nodes", "connectivity_changed_at")
    op.drop_column("nodes", "sched_changed_at")
