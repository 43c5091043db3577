"""telemetry: raw scalars in blocks of arrays (metric_blocks) instead of a row per point

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BLOCK_STEPS = 4096  # adapters/postgres/ingest_arrays.py BLOCK_STEPS, as of this revision
ARRAYS = ("steps", "walls", "vals", "offsets")
POINTS_VIEW = """
CREATE VIEW metric_points AS
SELECT b.series_id, u.step, u.wall_time, u.value, u.record_offset
FROM metric_blocks b, unnest(b.steps, b.walls, b.vals, b.offsets)
    AS u(step, wall_time, value, record_offset)
"""


def upgrade() -> None:
    op.create_table(
        "metric_blocks",
        sa.Column("series_id", sa.BigInteger(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("steps", ARRAY(sa.BigInteger()), nullable=False),
        sa.Column("walls", ARRAY(DOUBLE_PRECISION()), nullable=False),
        sa.Column("vals", ARRAY(DOUBLE_PRECISION()), nullable=False),
        sa.Column("offsets", ARRAY(sa.BigInteger()), nullable=False),
    )
    op.create_index(
        op.f("ix_metric_blocks_series_id_bucket"), "metric_blocks", ["series_id", "bucket"]
    )
    for column in ARRAYS:  # out of line, never compressed: compressing costs more than it saves
        op.execute(f"ALTER TABLE metric_blocks ALTER COLUMN {column} SET STORAGE EXTERNAL")
    op.execute(
        f"INSERT INTO metric_blocks SELECT series_id, step / {BLOCK_STEPS},"
        " array_agg(step ORDER BY step, record_offset),"
        " array_agg(wall_time ORDER BY step, record_offset),"
        " array_agg(value ORDER BY step, record_offset),"
        " array_agg(record_offset ORDER BY step, record_offset)"
        f" FROM metric_points GROUP BY series_id, step / {BLOCK_STEPS}"
    )
    op.drop_table("metric_points")
    op.execute(POINTS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW metric_points")
    op.create_table(
        "metric_points",
        sa.Column("series_id", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("wall_time", DOUBLE_PRECISION(), nullable=False),
        sa.Column("value", DOUBLE_PRECISION(), nullable=False),
        sa.Column("record_offset", sa.BigInteger(), nullable=False),
    )
    op.create_index(op.f("ix_metric_points_series_id_step"), "metric_points", ["series_id", "step"])
    op.execute(
        "INSERT INTO metric_points SELECT b.series_id, u.* FROM metric_blocks b,"
        " unnest(b.steps, b.walls, b.vals, b.offsets) AS u"
    )
    op.drop_table("metric_blocks")
