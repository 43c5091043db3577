"""The artifacts schema (part of ``tables.metadata``): each completed member's output manifest
(migration 0008; ``node`` since 0011) and the requests to hash outputs kept on nodes again
(``output_scans``, migration 0011)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from adapters.postgres.tables import metadata, ts

artifacts = Table(  # a member's output manifest, recorded when it completed
    "artifacts",
    metadata,
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), primary_key=True),
    Column("job_id", Text, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("attempt_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("member_index", Integer, nullable=False),
    Column("digest", Text, nullable=False),
    Column("manifest", Text, nullable=False),  # canonical JSON of domain.artifacts.Manifest
    ts("recorded_at"),
    Column("node", Text),  # where the files live (a node's disk); NULL: the control plane's
    Index("ix_artifacts_job_id", "job_id"),
)

checkpoints = Table(  # a complete checkpoint of an attempt, its files kept as blobs (0021)
    "checkpoints",
    metadata,
    Column("job_id", Text, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("step", BigInteger, nullable=True),
    Column("digest", Text, nullable=False),
    Column("manifest", JSONB, nullable=False),  # domain.artifacts.Manifest; files by blob sha256
    ts("recorded_at"),
    # the checkpoint's directory when it is kept in place (Slurm's shared directory, 0023):
    # its manifest then names no blobs; NULL: its files are blobs
    Column("kept_in", Text, nullable=True),
)

output_scans = Table(  # tp artifacts verify of outputs kept on a node: the request, the answer
    "output_scans",
    metadata,
    Column("id", Text, primary_key=True),
    Column("node", Text, nullable=False),
    Column("job_id", Text, nullable=False),
    Column("attempt_id", Text, nullable=False),
    Column("member_id", Text, nullable=False),
    Column("member_index", Integer, nullable=False),
    ts("requested_at"),
    ts("done_at", nullable=True),
    Column("manifest", Text),  # canonical JSON of domain.artifacts.Manifest; NULL: none found
    Column("error", Text, nullable=False, server_default=""),
    # a fetch (0030): the file to send instead of a scan; its answer is the blob stored
    Column("fetch_path", Text, nullable=True),
    Column("fetch_size", BigInteger, nullable=True),
    Column("fetch_sha256", Text, nullable=True),
    CheckConstraint(
        "(fetch_path IS NULL) = (fetch_size IS NULL) AND (fetch_path IS NULL) ="
        " (fetch_sha256 IS NULL)",
        name="fetch_whole",
    ),
    Index(
        "ix_output_scans_pending", "node", "requested_at", postgresql_where=text("done_at IS NULL")
    ),
)
