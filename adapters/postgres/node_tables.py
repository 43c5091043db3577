"""The node backend's schema (part of ``tables.metadata``; migrations 0003 on): fleet checks,
the nodes' control links and security events, enrollment (join tokens, control credentials),
this control plane's installation id, and the two-phase launch ledger (``launches``,
``member_launches``). Read and written by ``nodes.py``, ``node_links.py`` and ``launches.py``."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import (
    DOUBLE_PRECISION,
    JSONB,
)

from adapters.postgres.tables import metadata, one_of, ts
from domain.node_events import NodeEventKind
from domain.node_protocol import Decision, Phase

pool_checks = Table(  # `tp fleet check`: one row per check, results once it ended
    "pool_checks",
    metadata,
    Column("id", Text, primary_key=True),
    Column("pool", Text, ForeignKey("pools.name", ondelete="CASCADE"), nullable=False),
    Column("job_id", Text, nullable=False),
    Column("nodes", JSONB, nullable=False),  # node names by member index
    ts("started_at"),
    ts("finished_at", nullable=True),
    Column("results", JSONB, nullable=True),  # [{"node", "ok", "detail"}]
    Column("note", Text, nullable=False, server_default=""),
    Index("ix_pool_checks_pool_started_at", "pool", "started_at"),
)

node_links = Table(  # one row per node: its latest control stream
    "node_links",
    metadata,
    Column("node", Text, ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True),
    Column("session", BigInteger, nullable=False),
    Column("gateway", Text, nullable=False),
    ts("connected_at"),
    ts("heartbeat_at"),
    Column("gpus", Integer, nullable=False),
    Column("gpu_model", Text, nullable=True),
    Column("cpus", DOUBLE_PRECISION, nullable=False),
    Column("memory_mb", BigInteger, nullable=False),
    Column("address", Text, nullable=False),
    Column("daemon_version", Text, nullable=False, server_default=""),
    ts("closed_at", nullable=True),  # its gateway saw the stream end (migration 0014)
    Column("peer", Text, nullable=False, server_default=""),  # the stream's IP address
    Column("instance", Text, nullable=False, server_default=""),  # the daemon process's id
    Column("gpu_inventory", JSONB, nullable=True),  # the GPUs it detected (migration 0024)
    CheckConstraint("session >= 1", name="session"),
    CheckConstraint("gpus >= 0 AND cpus >= 0 AND memory_mb >= 0", name="capacity"),
)

node_events = Table(  # security events about control sessions, coalesced (domain/node_events)
    "node_events",
    metadata,
    Column("node", Text, ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True),
    Column("kind", Text, primary_key=True),
    Column("source", Text, primary_key=True),
    ts("first_at"),
    ts("last_at"),
    Column("count", BigInteger, nullable=False),
    Column("message", Text, nullable=False),
    one_of("kind", NodeEventKind),
    CheckConstraint("count >= 1", name="count"),
    Index("ix_node_events_node_last_at", "node", "last_at"),
)

join_tokens = Table(
    "join_tokens",
    metadata,
    Column("token_hash", Text, primary_key=True),
    Column("pool", Text, ForeignKey("pools.name"), nullable=False),
    Column("node_name", Text, nullable=True),
    Column("created_by", Text, nullable=False),
    ts("created_at"),
    ts("expires_at"),
    ts("used_at", nullable=True),
    Column("used_by", Text, nullable=True),
    CheckConstraint("(used_at IS NULL) = (used_by IS NULL)", name="used"),
)

node_credentials = Table(
    "node_credentials",
    metadata,
    Column("id", Text, primary_key=True),
    Column("node", Text, ForeignKey("nodes.name", ondelete="CASCADE"), nullable=False),
    Column("credential_hash", Text, nullable=False, unique=True),
    ts("created_at"),
    ts("valid_until", nullable=True),
    Index("ix_node_credentials_node", "node"),
)

installation = Table(  # this control plane's id, made once by migration 0015 (one row)
    "installation",
    metadata,
    Column("id", Text, primary_key=True),
    ts("created_at"),
)

launches = Table(  # one two-phase launch per attempt
    "launches",
    metadata,
    Column("attempt_id", Text, ForeignKey("attempts.id", ondelete="CASCADE"), primary_key=True),
    Column("job_id", Text, nullable=False),
    ts("began_at"),
    Column("master_node", Text, nullable=False),
    Column("master_port", Integer, nullable=False),
    Column("decision", Text, nullable=True),
    ts("decided_at", nullable=True),
    Column("reason", Text, nullable=False, server_default=""),
    Column("coordinator", Text, nullable=False, server_default=""),
    Column("retry", Boolean, nullable=False, server_default="false"),
    one_of("decision", Decision),
    CheckConstraint("master_port BETWEEN 1 AND 65535", name="master_port"),
    CheckConstraint("(decision IS NULL) = (decided_at IS NULL)", name="decided_at"),
    Index("ix_launches_master_node", "master_node"),
)

member_launches = Table(
    "member_launches",
    metadata,
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), primary_key=True),
    Column(
        "attempt_id",
        Text,
        ForeignKey("launches.attempt_id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("idx", Integer, nullable=False),
    Column("node", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("vote", Boolean, nullable=True),
    Column("vote_reason", Text, nullable=False, server_default=""),
    Column("vote_busy", Boolean, nullable=False, server_default="false"),
    ts("voted_at", nullable=True),
    Column("phase", Text, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=False, server_default=""),
    ts("reported_at", nullable=True),
    Column("progress", Text, nullable=False, server_default=""),
    ts("progress_at", nullable=True),
    ts("stop_requested_at", nullable=True),
    ts("released_at", nullable=True),
    Column("engine", Text, nullable=False, server_default=""),  # prepared on (with the vote)
    Column("unaccounted", Text, nullable=False, server_default=""),  # why unknown, "": held
    UniqueConstraint("attempt_id", "idx"),
    one_of("phase", Phase),
    CheckConstraint("idx >= 0", name="idx"),
    CheckConstraint("epoch >= 1", name="epoch"),
    # the gateways poll the unreleased members of their nodes
    Index("ix_member_launches_node", "node", postgresql_where=text("released_at IS NULL")),
)
