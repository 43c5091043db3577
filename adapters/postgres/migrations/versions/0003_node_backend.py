"""node backend: fencing epoch and address of nodes, control links, join tokens, node
credentials, and the two-phase launch ledger (launches, member_launches)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the enum values at this revision (a later enum change needs a migration).
DECISIONS = ("commit", "abort")
PHASES = (
    "preparing",
    "prepared",
    "refused",
    "aborted",
    "starting",
    "running",
    "exited",
    "missing",
)


def check(table: str, name: str, sql: str) -> sa.CheckConstraint:
    # op.f(): the name is final, not run through the naming convention again
    return sa.CheckConstraint(sql, name=op.f(f"ck_{table}_{name}"))


def one_of(table: str, column: str, values: Sequence[str]) -> sa.CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return check(table, column, f"{column} IN ({listed})")


def fk(
    table: str, columns: list[str], parent: str, parent_columns: list[str], cascade: bool = False
) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        columns,
        [f"{parent}.{c}" for c in parent_columns],
        name=op.f(f"fk_{table}_{columns[0]}_{parent}"),
        ondelete="CASCADE" if cascade else None,
    )


def text(name: str, nullable: bool = False, default: str | None = None) -> sa.Column[Any]:
    return sa.Column(name, sa.Text(), nullable=nullable, server_default=default)


def integer(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.Integer(), nullable=nullable)


def bigint(name: str, nullable: bool = False, default: str | None = None) -> sa.Column[Any]:
    return sa.Column(name, sa.BigInteger(), nullable=nullable, server_default=default)


def ts(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def pk(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def _nodes() -> None:
    # existing nodes start at epoch 1 with no address (the local backend's keep them so)
    op.add_column("nodes", bigint("epoch", default="1"))
    op.add_column("nodes", text("address", default=""))
    op.create_check_constraint(op.f("ck_nodes_epoch"), "nodes", "epoch >= 1")
    op.create_table(
        "node_links",
        text("node"),
        bigint("session"),
        text("gateway"),
        ts("connected_at"),
        ts("heartbeat_at"),
        integer("gpus"),
        text("gpu_model", nullable=True),
        sa.Column("cpus", DOUBLE_PRECISION(), nullable=False),
        bigint("memory_mb"),
        text("address"),
        text("daemon_version", default=""),
        pk("node_links", "node"),
        fk("node_links", ["node"], "nodes", ["name"], cascade=True),
        check("node_links", "session", "session >= 1"),
        check("node_links", "capacity", "gpus >= 0 AND cpus >= 0 AND memory_mb >= 0"),
    )


def _identity() -> None:
    op.create_table(
        "join_tokens",
        text("token_hash"),
        text("pool"),
        text("node_name", nullable=True),
        text("created_by"),
        ts("created_at"),
        ts("expires_at"),
        ts("used_at", nullable=True),
        text("used_by", nullable=True),
        pk("join_tokens", "token_hash"),
        fk("join_tokens", ["pool"], "pools", ["name"]),
        check("join_tokens", "used", "(used_at IS NULL) = (used_by IS NULL)"),
    )
    op.create_table(
        "node_credentials",
        text("id"),
        text("node"),
        text("credential_hash"),
        ts("created_at"),
        ts("valid_until", nullable=True),
        pk("node_credentials", "id"),
        fk("node_credentials", ["node"], "nodes", ["name"], cascade=True),
        sa.UniqueConstraint("credential_hash", name=op.f("uq_node_credentials_credential_hash")),
    )
    op.create_index(op.f("ix_node_credentials_node"), "node_credentials", ["node"])


def _launches() -> None:
    op.create_table(
        "launches",
        text("attempt_id"),
        text("job_id"),
        ts("began_at"),
        text("master_node"),
        integer("master_port"),
        text("decision", nullable=True),
        ts("decided_at", nullable=True),
        text("reason", default=""),
        text("coordinator", default=""),
        sa.Column("retry", sa.Boolean(), nullable=False, server_default=sa.false()),
        pk("launches", "attempt_id"),
        fk("launches", ["attempt_id"], "attempts", ["id"], cascade=True),
        one_of("launches", "decision", DECISIONS),
        check("launches", "master_port", "master_port BETWEEN 1 AND 65535"),
        check("launches", "decided_at", "(decision IS NULL) = (decided_at IS NULL)"),
    )
    op.create_index(op.f("ix_launches_master_node"), "launches", ["master_node"])
    op.create_table(
        "member_launches",
        text("member_id"),
        text("attempt_id"),
        integer("idx"),
        text("node"),
        bigint("epoch"),
        sa.Column("vote", sa.Boolean(), nullable=True),
        text("vote_reason", default=""),
        ts("voted_at", nullable=True),
        text("phase", nullable=True),
        integer("exit_code", nullable=True),
        text("reason", default=""),
        ts("reported_at", nullable=True),
        text("progress", default=""),
        ts("progress_at", nullable=True),
        ts("stop_requested_at", nullable=True),
        ts("released_at", nullable=True),
        pk("member_launches", "member_id"),
        fk("member_launches", ["member_id"], "members", ["id"], cascade=True),
        fk("member_launches", ["attempt_id"], "launches", ["attempt_id"], cascade=True),
        sa.UniqueConstraint("attempt_id", "idx", name=op.f("uq_member_launches_attempt_id_idx")),
        one_of("member_launches", "phase", PHASES),
        check("member_launches", "idx", "idx >= 0"),
        check("member_launches", "epoch", "epoch >= 1"),
    )
    op.create_index(
        op.f("ix_member_launches_node"),
        "member_launches",
        ["node"],
        postgresql_where=sa.text("released_at IS NULL"),
    )


def _member_logs() -> None:
    # the live output of node-backend members, in pieces at byte offsets
    op.create_table(
        "member_logs",
        text("member_id"),
        bigint("offset"),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        pk("member_logs", "member_id", "offset"),
        fk("member_logs", ["member_id"], "members", ["id"], cascade=True),
        check("member_logs", "offset", '"offset" >= 0'),
    )


def upgrade() -> None:
    _nodes()
    _identity()
    _launches()
    _member_logs()


def downgrade() -> None:
    for table in ("member_logs", "member_launches", "launches", "node_credentials", "join_tokens", "node_links"):
        op.drop_table(table)
    op.drop_constraint(op.f("ck_nodes_epoch"), "nodes", type_="check")
    op.drop_column("nodes", "address")
    op.drop_column("nodes", "epoch")
