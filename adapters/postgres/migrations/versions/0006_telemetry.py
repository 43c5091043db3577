"""telemetry: signing keys, collector sources with their watermarks, series, raw points, rollups

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _member_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["member_id"], ["members.id"], name=op.f(f"fk_{table}_member_id_members"),
        ondelete="CASCADE",
    )  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.Text(), nullable=False),
        sa.Column("purpose", sa.Text(), nullable=False),
        sa.Column("private_pem", sa.Text(), nullable=False),
        sa.Column("public_pem", sa.Text(), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )
    op.create_index(
        op.f("ix_signing_keys_purpose_created_at"), "signing_keys", ["purpose", "created_at"]
    )
    op.create_table(
        "telemetry_sources",
        sa.Column("member_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("member_id", "source", name=op.f("pk_telemetry_sources")),
        _member_fk("telemetry_sources"),
        sa.CheckConstraint("kind IN ('tfevents', 'jsonl')", name=op.f("ck_telemetry_sources_kind")),
    )
    counters = ("points", "duplicates", "corrupt_records", "dropped_records", "dropped_bytes")
    op.create_table(
        "telemetry_members",
        sa.Column("member_id", sa.Text(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False, server_default="0") for c in counters),
        _ts("last_batch_at"),
        sa.PrimaryKeyConstraint("member_id", name=op.f("pk_telemetry_members")),
        _member_fk("telemetry_members"),
    )
    op.create_table(
        "metric_series",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("member_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_value", DOUBLE_PRECISION(), nullable=False),
        sa.Column("last_wall", DOUBLE_PRECISION(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_series")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_metric_series_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["attempt_id"],
            ["attempts.id"],
            name=op.f("fk_metric_series_attempt_id_attempts"),
            ondelete="CASCADE",
        ),  # fmt: skip
        _member_fk("metric_series"),
        sa.UniqueConstraint(
            "member_id", "source", "tag", name=op.f("uq_metric_series_member_id_source_tag")
        ),
    )
    op.create_index(op.f("ix_metric_series_job_id_tag"), "metric_series", ["job_id", "tag"])
    op.create_table(
        "metric_points",
        sa.Column("series_id", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("wall_time", DOUBLE_PRECISION(), nullable=False),
        sa.Column("value", DOUBLE_PRECISION(), nullable=False),
        sa.Column("record_offset", sa.BigInteger(), nullable=False),
    )
    op.create_index(op.f("ix_metric_points_series_id_step"), "metric_points", ["series_id", "step"])
    op.create_table(
        "metric_rollups",
        sa.Column("series_id", sa.BigInteger(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("minimum", DOUBLE_PRECISION(), nullable=True),
        sa.Column("maximum", DOUBLE_PRECISION(), nullable=True),
        sa.Column("total", DOUBLE_PRECISION(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last", DOUBLE_PRECISION(), nullable=False),
        sa.Column("min_wall", DOUBLE_PRECISION(), nullable=False),
        sa.Column("max_wall", DOUBLE_PRECISION(), nullable=False),
        sa.PrimaryKeyConstraint("series_id", "width", "bucket", name=op.f("pk_metric_rollups")),
    )
    for wall in ("max_wall", "min_wall"):
        op.create_index(
            op.f(f"ix_metric_rollups_series_id_width_{wall}"),
            "metric_rollups",
            ["series_id", "width", wall],
        )


def downgrade() -> None:
    for table in (
        "metric_rollups",
        "metric_points",
        "metric_series",
        "telemetry_members",
        "telemetry_sources",
        "signing_keys",
    ):
        op.drop_table(table)
