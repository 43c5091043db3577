"""The telemetry schema (part of ``tables.metadata``; migrations 0006 and 0007).

``metric_blocks`` holds the raw scalars in blocks: one row per series, ``BLOCK_STEPS``-step
bucket and ingested batch, its points as arrays (step, wall time, value, record offset; sorted
by step, then record offset), stored out of line without compression. A row per point cost
PostgreSQL about six times the CPU at ingest (a heap tuple and an index entry per point), and
bounded queries read at most a few blocks. The view ``metric_points`` unnests them (for
inspection and tests; queries read blocks by bucket). No primary key and no foreign key, so
that the gateway can load it with COPY; exactly-once lives in
``telemetry_sources.watermark``: the highest record offset of each (member, source) already
stored, locked and raised in the transaction that stores the records above it.
``metric_rollups`` has one row per (series, tier width, bucket); bounded queries read it instead
of the raw points. Ingest appends its finest stored tier's rows to ``metric_rollup_deltas``,
folded into every tier of ``metric_rollups`` off the ack path (``metric_rollups.py``, 0033).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

from adapters.postgres.tables import metadata, ts
from domain.telemetry import STORED_TIERS

signing_keys = Table(  # collector tokens are signed by the newest key of their purpose
    "signing_keys",
    metadata,
    Column("kid", Text, primary_key=True),
    Column("purpose", Text, nullable=False),
    Column("private_pem", Text, nullable=False),
    Column("public_pem", Text, nullable=False),
    ts("created_at"),
    Index("ix_signing_keys_purpose_created_at", "purpose", "created_at"),
)

telemetry_sources = Table(
    "telemetry_sources",
    metadata,
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), nullable=False),
    Column("source", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("watermark", BigInteger, nullable=False),
    ts("updated_at"),
    PrimaryKeyConstraint("member_id", "source"),
    CheckConstraint("kind IN ('tfevents', 'jsonl')", name="kind"),
)

telemetry_members = Table(  # what each member's collector reported and what was stored
    "telemetry_members",
    metadata,
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), primary_key=True),
    Column("points", BigInteger, nullable=False, server_default="0"),
    Column("duplicates", BigInteger, nullable=False, server_default="0"),
    Column("corrupt_records", BigInteger, nullable=False, server_default="0"),
    Column("dropped_records", BigInteger, nullable=False, server_default="0"),
    Column("dropped_bytes", BigInteger, nullable=False, server_default="0"),
    ts("last_batch_at"),
)

metric_series = Table(
    "metric_series",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("job_id", Text, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("attempt_id", Text, ForeignKey("attempts.id", ondelete="CASCADE"), nullable=False),
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), nullable=False),
    Column("source", Text, nullable=False),
    Column("tag", Text, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("last_value", DOUBLE_PRECISION, nullable=False),
    Column("last_wall", DOUBLE_PRECISION, nullable=False),
    UniqueConstraint("member_id", "source", "tag"),
    Index("ix_metric_series_job_id_tag", "job_id", "tag"),
)

metric_blocks = Table(  # raw scalars, in blocks; see the module docstring
    "metric_blocks",
    metadata,
    Column("series_id", BigInteger, nullable=False),
    Column("bucket", BigInteger, nullable=False),  # every step of the block // BLOCK_STEPS
    Column("steps", ARRAY(BigInteger), nullable=False),
    Column("walls", ARRAY(DOUBLE_PRECISION), nullable=False),
    Column("vals", ARRAY(DOUBLE_PRECISION), nullable=False),
    Column("offsets", ARRAY(BigInteger), nullable=False),
    Index("ix_metric_blocks_series_id_bucket", "series_id", "bucket"),
)

metric_rollups = Table(
    "metric_rollups",
    metadata,
    Column("series_id", BigInteger, nullable=False),
    Column("width", Integer, nullable=False),
    Column("bucket", BigInteger, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("minimum", DOUBLE_PRECISION, nullable=True),
    Column("maximum", DOUBLE_PRECISION, nullable=True),
    Column("total", DOUBLE_PRECISION, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("last", DOUBLE_PRECISION, nullable=False),
    Column("min_wall", DOUBLE_PRECISION, nullable=False),
    Column("max_wall", DOUBLE_PRECISION, nullable=False),
    PrimaryKeyConstraint("series_id", "width", "bucket"),
    # a time range → the steps it covers, by the finest stored tier only (queries by wall
    # time; 0033: a fold's coarser rows, most of what it rewrites, add no entries here)
    Index(
        "ix_metric_rollups_finest_max_wall",
        "series_id",
        "max_wall",
        postgresql_where=text(f"width = {STORED_TIERS[0]}"),
    ),
    Index(
        "ix_metric_rollups_finest_min_wall",
        "series_id",
        "min_wall",
        postgresql_where=text(f"width = {STORED_TIERS[0]}"),
    ),
)

metric_rollup_deltas = Table(  # rollups acked, not yet folded into metric_rollups (0033)
    "metric_rollup_deltas",
    metadata,
    Column("seq", BigInteger, Identity(always=False), primary_key=True),  # order within a series
    Column("series_id", BigInteger, nullable=False),
    Column("width", Integer, nullable=False),  # STORED_TIERS[0]
    Column("bucket", BigInteger, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("minimum", DOUBLE_PRECISION, nullable=False),  # NaN: no finite value
    Column("maximum", DOUBLE_PRECISION, nullable=False),
    Column("total", DOUBLE_PRECISION, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("last", DOUBLE_PRECISION, nullable=False),
    Column("min_wall", DOUBLE_PRECISION, nullable=False),
    Column("max_wall", DOUBLE_PRECISION, nullable=False),
    Index("ix_metric_rollup_deltas_series_id", "series_id"),
)
