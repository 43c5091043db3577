"""metric_rollup_deltas: rollups folded in off the ack path (docs/telemetry.md, "Rollups").

The telemetry gateway used to merge every batch's rollups into ``metric_rollups`` in the batch's
transaction: about 37 ``INSERT … ON CONFLICT DO UPDATE`` rows per batch of 100 points (9 tiers ×
4 series), each a new row version and three index entries, PostgreSQL's largest cost at thousands
of streams. Now the batch's transaction appends the rollups of its finest stored tier only (a
row or two per series) to ``metric_rollup_deltas``, and a fold (the gateway every few seconds;
a reader for the series it reads, first) deletes pending deltas and merges them into every tier
in one statement. A delta is written in the same transaction as its points, so what is acked is
folded exactly once, whatever process dies when.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION

revision: str = "0033"
down_revision: str | Sequence[str] | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FINEST = 64  # STORED_TIERS[0] (a migration keeps its own constants)


def upgrade() -> None:
    op.create_table(
        "metric_rollup_deltas",
        sa.Column("seq", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("series_id", sa.BigInteger, nullable=False),
        sa.Column("width", sa.Integer, nullable=False),
        sa.Column("bucket", sa.BigInteger, nullable=False),
        sa.Column("first_step", sa.BigInteger, nullable=False),
        sa.Column("last_step", sa.BigInteger, nullable=False),
        sa.Column("minimum", DOUBLE_PRECISION, nullable=False),
        sa.Column("maximum", DOUBLE_PRECISION, nullable=False),
        sa.Column("total", DOUBLE_PRECISION, nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
        sa.Column("last", DOUBLE_PRECISION, nullable=False),
        sa.Column("min_wall", DOUBLE_PRECISION, nullable=False),
        sa.Column("max_wall", DOUBLE_PRECISION, nullable=False),
    )
    op.create_index("ix_metric_rollup_deltas_series_id", "metric_rollup_deltas", ["series_id"])
    # the wall-time indexes serve the finest stored tier only (the steps of a time range): a
    # fold rewrites a series' coarser rows too, which then add no entries to them
    for wall in ("max_wall", "min_wall"):
        op.drop_index(f"ix_metric_rollups_series_id_width_{wall}", table_name="metric_rollups")
        op.create_index(
            f"ix_metric_rollups_finest_{wall}",
            "metric_rollups",
            ["series_id", wall],
            postgresql_where=sa.text(f"width = {FINEST}"),
        )
    # rows updated at every batch: room on their page for the new version (a HOT update: no
    # index entry), instead of a full page and a new entry in every index each time
    for table in ("metric_series", "telemetry_sources", "telemetry_members"):
        op.execute(f"ALTER TABLE {table} SET (fillfactor = 50)")


def downgrade() -> None:
    # fold what is pending first (every tier), so that no acked point's rollup is lost
    op.execute(
        "WITH d AS (DELETE FROM metric_rollup_deltas RETURNING *)"
        + _MERGE.replace("$2::int[]", "ARRAY[" + ", ".join(str(8**k) for k in range(2, 11)) + "]")
    )
    op.drop_table("metric_rollup_deltas")
    for wall in ("max_wall", "min_wall"):
        op.drop_index(f"ix_metric_rollups_finest_{wall}", table_name="metric_rollups")
        op.create_index(
            f"ix_metric_rollups_series_id_width_{wall}",
            "metric_rollups",
            ["series_id", "width", wall],
        )
    for table in ("metric_series", "telemetry_sources", "telemetry_members"):
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")


_MERGE = """
, f AS (  -- the finest stored tier: a series' deltas of one bucket into one row
    SELECT series_id, bucket, min(first_step) AS first_step, max(last_step) AS last_step,
        min(NULLIF(minimum, 'NaN')) AS minimum, max(NULLIF(maximum, 'NaN')) AS maximum,
        sum(total) AS total, sum(count) AS count,
        (array_agg(last ORDER BY last_step DESC, seq DESC))[1] AS last,
        min(min_wall) AS min_wall, max(max_wall) AS max_wall
    FROM d GROUP BY series_id, bucket
), t AS (  -- every stored tier from it (its buckets' steps do not overlap)
    SELECT f.series_id, w.width, f.first_step / w.width AS bucket,
        min(f.first_step) AS first_step, max(f.last_step) AS last_step,
        min(f.minimum) AS minimum, max(f.maximum) AS maximum, sum(f.total) AS total,
        sum(f.count) AS count, (array_agg(f.last ORDER BY f.last_step DESC))[1] AS last,
        min(f.min_wall) AS min_wall, max(f.max_wall) AS max_wall
    FROM f, unnest($2::int[]) AS w(width)
    GROUP BY 1, 2, 3
), merged AS (
    INSERT INTO metric_rollups AS r (series_id, width, bucket, first_step, last_step, minimum,
        maximum, total, count, last, min_wall, max_wall)
    SELECT * FROM t ORDER BY series_id, width, bucket
    ON CONFLICT (series_id, width, bucket) DO UPDATE SET
        first_step = LEAST(r.first_step, EXCLUDED.first_step),
        last = CASE WHEN EXCLUDED.last_step >= r.last_step THEN EXCLUDED.last ELSE r.last END,
        last_step = GREATEST(r.last_step, EXCLUDED.last_step),
        minimum = LEAST(r.minimum, EXCLUDED.minimum),
        maximum = GREATEST(r.maximum, EXCLUDED.maximum),
        total = r.total + EXCLUDED.total,
        count = r.count + EXCLUDED.count,
        min_wall = LEAST(r.min_wall, EXCLUDED.min_wall),
        max_wall = GREATEST(r.max_wall, EXCLUDED.max_wall)
    RETURNING 1
)
SELECT (SELECT count(*) FROM d) AS deltas, (SELECT count(*) FROM merged) AS merged
"""  # a copy of adapters/postgres/metric_rollups.py's (a migration keeps its own SQL)
