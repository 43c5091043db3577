"""fleets, policy and reservations: users, teams, queues, pools, nodes and their GPUs, launch
reservations, profiles; roles move from tokens to users; jobs get their queue, members their
node and role

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the enum values at this revision (a later enum change needs a migration).
ROLES = ("admin", "operator", "member", "viewer")  # most privileged first
SCHED_STATES = ("schedulable", "cordoned", "draining")
CONNECTIVITY = ("connected", "disconnected", "lost")
MAX_GPUS_PER_NODE = 64
DEFAULT_TEAM = "default"
DEFAULT_QUEUE = "default"


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


def integer(name: str, nullable: bool = False, default: str | None = None) -> sa.Column[Any]:
    return sa.Column(name, sa.Integer(), nullable=nullable, server_default=default)


def ts(name: str, default: bool = False) -> sa.Column[Any]:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.func.now() if default else None,
    )


def pk(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def _policy() -> None:
    op.create_table(
        "users",
        text("name"),
        text("role"),
        ts("created_at", default=True),
        sa.Column("disabled", sa.Boolean(), server_default=sa.false(), nullable=False),
        pk("users", "name"),
        one_of("users", "role", ROLES),
    )
    op.create_table("teams", text("name"), pk("teams", "name"))
    op.create_table(
        "team_members",
        text("user_name"),
        text("team"),
        pk("team_members", "user_name", "team"),
        fk("team_members", ["user_name"], "users", ["name"], cascade=True),
        fk("team_members", ["team"], "teams", ["name"]),
    )
    op.create_index(op.f("ix_team_members_team"), "team_members", ["team"])

    # Every token name becomes a user with the most privileged role among its tokens, created
    # when its first token was. Such users join team `default` (the server creates its queue at
    # start, as on a new system), so that they can go on submitting.
    rank = " ".join(f"WHEN '{r}' THEN {i}" for i, r in enumerate(ROLES))
    op.execute(
        "INSERT INTO users (name, role, created_at) "
        f"SELECT name, (array_agg(role ORDER BY CASE role {rank} END))[1], min(created_at) "
        "FROM api_tokens GROUP BY name"
    )
    op.execute(
        f"INSERT INTO teams (name) SELECT '{DEFAULT_TEAM}' WHERE EXISTS (SELECT 1 FROM users)"
    )
    op.execute(f"INSERT INTO team_members (user_name, team) SELECT name, '{DEFAULT_TEAM}' FROM users")
    op.create_foreign_key(
        op.f("fk_api_tokens_name_users"), "api_tokens", "users", ["name"], ["name"]
    )
    op.drop_constraint(op.f("ck_api_tokens_role"), "api_tokens", type_="check")
    op.drop_column("api_tokens", "role")

    op.create_table(
        "queues",
        text("name"),
        text("team"),
        integer("priority", default="0"),
        integer("gpu_quota", nullable=True),
        integer("job_quota", nullable=True),
        pk("queues", "name"),
        fk("queues", ["team"], "teams", ["name"]),
        check("queues", "gpu_quota", "gpu_quota >= 0"),
        check("queues", "job_quota", "job_quota >= 0"),
    )


def _fleet() -> None:
    op.create_table(
        "pools",
        text("name"),
        text("fleet"),
        text("backend"),
        text("gpu_model", nullable=True),
        integer("gpus_per_node"),
        integer("mcpu_per_node"),
        integer("memory_mb_per_node"),
        text("description", default=""),
        pk("pools", "name"),
        check("pools", "gpus_per_node", f"gpus_per_node BETWEEN 0 AND {MAX_GPUS_PER_NODE}"),
        check("pools", "mcpu_per_node", "mcpu_per_node > 0"),
        check("pools", "memory_mb_per_node", "memory_mb_per_node > 0"),
    )
    op.create_table(
        "nodes",
        text("name"),
        text("pool"),
        text("sched"),
        text("connectivity"),
        integer("mcpu"),
        integer("memory_mb"),
        integer("used_mcpu", default="0"),
        integer("used_memory_mb", default="0"),
        ts("updated_at", default=True),
        pk("nodes", "name"),
        fk("nodes", ["pool"], "pools", ["name"]),
        one_of("nodes", "sched", SCHED_STATES),
        one_of("nodes", "connectivity", CONNECTIVITY),
        check("nodes", "used_mcpu", "used_mcpu BETWEEN 0 AND mcpu"),
        check("nodes", "used_memory_mb", "used_memory_mb BETWEEN 0 AND memory_mb"),
    )
    op.create_index(op.f("ix_nodes_pool"), "nodes", ["pool"])
    op.create_table(
        "node_gpus",
        text("node"),
        integer("gpu_index"),
        pk("node_gpus", "node", "gpu_index"),
        fk("node_gpus", ["node"], "nodes", ["name"], cascade=True),
    )
    op.create_table(
        "profiles",
        text("name"),
        text("request"),
        text("description", default=""),
        pk("profiles", "name"),
    )


def _reservations() -> None:
    op.create_table(
        "reservations",
        text("attempt_id"),
        text("job_id"),
        text("queue"),
        ts("reserved_at"),
        pk("reservations", "attempt_id"),
        fk("reservations", ["attempt_id"], "attempts", ["id"], cascade=True),
    )
    op.create_table(
        "reservation_members",
        text("attempt_id"),
        integer("member"),
        text("role"),
        text("node"),
        integer("mcpu"),
        integer("memory_mb"),
        pk("reservation_members", "attempt_id", "member"),
        fk("reservation_members", ["attempt_id"], "reservations", ["attempt_id"], cascade=True),
        fk("reservation_members", ["node"], "nodes", ["name"]),
    )
    op.create_index(op.f("ix_reservation_members_node"), "reservation_members", ["node"])
    op.create_table(
        "reserved_gpus",
        text("node"),
        integer("gpu_index"),
        text("attempt_id"),
        integer("member"),
        pk("reserved_gpus", "node", "gpu_index"),
        fk("reserved_gpus", ["attempt_id"], "reservations", ["attempt_id"], cascade=True),
        fk("reserved_gpus", ["node", "gpu_index"], "node_gpus", ["node", "gpu_index"]),
    )
    op.create_index(op.f("ix_reserved_gpus_attempt_id"), "reserved_gpus", ["attempt_id"])


def upgrade() -> None:
    _policy()
    _fleet()
    _reservations()
    op.add_column("jobs", text("queue", default=DEFAULT_QUEUE))
    op.execute("UPDATE jobs SET queue = spec->>'queue' WHERE spec->>'queue' IS NOT NULL")
    op.create_index(
        op.f("ix_jobs_state_queue_created_at_id"), "jobs", ["state", "queue", "created_at", "id"]
    )
    op.add_column("members", text("node", nullable=True))
    op.add_column("members", text("role", default="main"))


def downgrade() -> None:
    op.drop_column("members", "role")
    op.drop_column("members", "node")
    op.drop_index(op.f("ix_jobs_state_queue_created_at_id"), "jobs")
    op.drop_column("jobs", "queue")
    for table in (
        "reserved_gpus",
        "reservation_members",
        "reservations",
        "profiles",
        "node_gpus",
        "nodes",
        "pools",
        "queues",
    ):
        op.drop_table(table)
    # the role goes back onto every token: its user's role
    op.add_column("api_tokens", text("role", nullable=True))
    op.execute("UPDATE api_tokens t SET role = u.role FROM users u WHERE u.name = t.name")
    op.alter_column("api_tokens", "role", nullable=False)
    listed = ", ".join(f"'{r}'" for r in ROLES)
    op.create_check_constraint(op.f("ck_api_tokens_role"), "api_tokens", f"role IN ({listed})")
    op.drop_constraint(op.f("fk_api_tokens_name_users"), "api_tokens", type_="foreignkey")
    op.drop_table("team_members")
    op.drop_table("teams")
    op.drop_table("users")
