"""The schema, as SQLAlchemy Core tables. Migrations must produce exactly this (a test checks).

Idempotency lives in constraints: ``submissions`` has one row per retry key (primary key), per
preview (``uq_submissions_preview_id``) and per job (``uq_submissions_job_id``), and ``jobs``
one row per preview (``uq_jobs_preview_id``).

So does the safety of reservations: each node owns a window of 64 numbers on one line of GPU
numbers (``nodes.slot * 64 + gpu_index``); a reservation member's GPUs are a set of those
numbers (``reservation_members.gpus``, an ``int4multirange``) and the exclusion constraint
``ex_reservation_members_gpus`` (GiST, ``gpus WITH &&``) makes a double-booked GPU impossible,
whoever writes; a CHECK keeps the set inside its node's window and below its GPU count, copied
under a foreign key to ``nodes (name, slot, gpus)`` (migration 0032). The CHECKs on ``nodes``
(``used_mcpu BETWEEN 0 AND mcpu``, same for memory) do the same for CPUs and memory.
``nodes.mcpu``/``memory_mb``/``gpus`` are copies of the pool's shape, kept in step with it, so
that a CHECK can see them.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import (
    DOUBLE_PRECISION,
    INT4MULTIRANGE,
    JSONB,
    ExcludeConstraint,
)

from domain.auth import Role
from domain.fleet import MAX_GPUS_PER_NODE, Connectivity, SchedState, Validation
from domain.lifecycle import AttemptState, JobState, MemberState
from domain.node_events import NodeEventKind
from domain.node_protocol import Decision, Phase

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

MAX_NODE_SLOT = 33_554_430  # a node's window, slot * 64 + 64, fits an int4


def one_of(column: str, values: type[StrEnum]) -> CheckConstraint:
    """``CHECK (column IN (...))`` over an enum's values, named ``ck_<table>_<column>``."""
    listed = ", ".join(f"'{v.value}'" for v in values)
    return CheckConstraint(f"{column} IN ({listed})", name=column)


def ts(name: str, nullable: bool = False) -> Column[object]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


previews = Table(
    "previews",
    metadata,
    Column("id", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("digest", Text, nullable=False),
    ts("created_at"),
    ts("expires_at"),
    Column("intent", JSONB, nullable=False),
    Column("spec", JSONB, nullable=False),
)

submissions = Table(  # the commit ledger: a retry key is the owner's (migration 0013)
    "submissions",
    metadata,
    Column("retry_key", Text, nullable=False),
    Column("preview_id", Text, nullable=False, unique=True),
    Column("digest", Text, nullable=False),
    Column("job_id", Text, nullable=False, unique=True),
    Column("owner", Text, nullable=False),
    ts("created_at"),
    PrimaryKeyConstraint("owner", "retry_key"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("preview_id", Text, nullable=False, unique=True),
    Column("owner", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("spec", JSONB, nullable=False),
    ts("created_at"),
    ts("updated_at"),
    Column("reason", Text, nullable=False, server_default=""),
    Column("exit_code", Integer, nullable=True),
    Column("queue", Text, nullable=False, server_default="default"),  # = spec.queue
    ts("not_before", nullable=True),  # pending again: not admitted before (its retry backoff)
    # the transaction that last wrote the row (default and trigger, migration 0031): the
    # scheduler reads the jobs changed since its last pass
    Column(
        "changed",
        BigInteger,
        nullable=False,
        server_default=text("(pg_current_xact_id())::text::bigint"),
    ),
    one_of("state", JobState),
    Index("ix_jobs_created_at_id", "created_at", "id"),
    Index("ix_jobs_owner_created_at_id", "owner", "created_at", "id"),
    Index("ix_jobs_state_created_at_id", "state", "created_at", "id"),
    # pending jobs of one queue, FIFO (the scheduler's snapshot)
    Index("ix_jobs_state_queue_created_at_id", "state", "queue", "created_at", "id"),
    Index("ix_jobs_queue_created_at_id", "queue", "created_at", "id"),  # GET /v1/jobs?queue=
    Index("ix_jobs_changed", "changed"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Text, primary_key=True),
    Column("job_id", Text, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", Text, nullable=False),
    ts("created_at"),
    ts("updated_at"),
    Column("reason", Text, nullable=False, server_default=""),
    Column("exit_code", Integer, nullable=True),
    Column("cause", Text, nullable=False, server_default=""),  # domain/retry.py
    # what it started from (domain/checkpoints.py Resume): written only by note_resume
    Column("resume", JSONB, nullable=True),
    UniqueConstraint("job_id", "number"),
    one_of("state", AttemptState),
)

members = Table(
    "members",
    metadata,
    Column("id", Text, primary_key=True),
    Column("attempt_id", Text, ForeignKey("attempts.id", ondelete="CASCADE"), nullable=False),
    Column("index", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("handle", Text, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=False, server_default=""),
    ts("updated_at"),
    Column("node", Text, nullable=True),
    Column("role", Text, nullable=False, server_default="main"),
    UniqueConstraint("attempt_id", "index"),
    one_of("state", MemberState),
)

member_logs = Table(
    "member_logs",
    metadata,
    Column("member_id", Text, ForeignKey("members.id", ondelete="CASCADE"), primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("data", LargeBinary, nullable=False),
    CheckConstraint('"offset" >= 0', name="offset"),
)

attempt_logs = Table(  # one final log per member of an attempt (migration 0017)
    "attempt_logs",
    metadata,
    Column(
        "attempt_id",
        Text,
        ForeignKey("attempts.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("member", Integer, primary_key=True, server_default="0"),
    Column("data", LargeBinary, nullable=False),
    Column("truncated", Boolean, nullable=False),
    Column("saved_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("member >= 0", name="member"),
)

users = Table(
    "users",
    metadata,
    Column("name", Text, primary_key=True),
    Column("role", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("disabled", Boolean, nullable=False, server_default="false"),
    one_of("role", Role),
)

teams = Table(
    "teams",
    metadata,
    Column("name", Text, primary_key=True),
)

team_members = Table(
    "team_members",
    metadata,
    Column("user_name", Text, ForeignKey("users.name", ondelete="CASCADE"), primary_key=True),
    Column("team", Text, ForeignKey("teams.name"), primary_key=True),
    Index("ix_team_members_team", "team"),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Text, primary_key=True),
    Column("name", Text, ForeignKey("users.name"), nullable=False),  # its user
    Column("token_hash", Text, nullable=False, unique=True),
    ts("created_at"),
    Column("label", Text, nullable=False, server_default=""),
    ts("expires_at", nullable=True),  # NULL: never
    ts("last_used_at", nullable=True),  # written at most once a minute a token
    ts("revoked_at", nullable=True),
    Column("revoked_by", Text, nullable=True),  # a user's name, kept if the user goes
    Index("ix_api_tokens_name", "name"),
)

queues = Table(
    "queues",
    metadata,
    Column("name", Text, primary_key=True),
    Column("team", Text, ForeignKey("teams.name"), nullable=False),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("gpu_quota", Integer, nullable=True),
    Column("job_quota", Integer, nullable=True),
    Column("max_attempts", Integer, nullable=True),  # caps a job's retry policy
    CheckConstraint("gpu_quota >= 0", name="gpu_quota"),
    CheckConstraint("job_quota >= 0", name="job_quota"),
)

pools = Table(
    "pools",
    metadata,
    Column("name", Text, primary_key=True),
    Column("fleet", Text, nullable=False),
    Column("backend", Text, nullable=False),
    Column("gpu_model", Text, nullable=True),
    Column("gpus_per_node", Integer, nullable=False),
    Column("mcpu_per_node", Integer, nullable=False),  # CPUs × 1000, exact
    Column("memory_mb_per_node", Integer, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("unavailable", Text, nullable=False, server_default=""),  # why it takes no work
    CheckConstraint(f"gpus_per_node BETWEEN 0 AND {MAX_GPUS_PER_NODE}", name="gpus_per_node"),
    CheckConstraint("mcpu_per_node > 0", name="mcpu_per_node"),
    CheckConstraint("memory_mb_per_node > 0", name="memory_mb_per_node"),
)

nodes = Table(
    "nodes",
    metadata,
    Column("name", Text, primary_key=True),
    Column("pool", Text, ForeignKey("pools.name"), nullable=False),
    Column("sched", Text, nullable=False),
    Column("connectivity", Text, nullable=False),
    Column("mcpu", Integer, nullable=False),  # the pool's, copied so the CHECKs can see them
    Column("memory_mb", Integer, nullable=False),
    Column("used_mcpu", Integer, nullable=False, server_default="0"),
    Column("used_memory_mb", Integer, nullable=False, server_default="0"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the node backend: its fencing epoch, and how peers reach it (what its daemon reported)
    Column("epoch", BigInteger, nullable=False, server_default="1"),
    Column("address", Text, nullable=False, server_default=""),
    # its result in its pool's last check (`tp fleet check`)
    Column("validation", Text, nullable=False, server_default="unchecked"),
    Column("validation_reason", Text, nullable=False, server_default=""),
    ts("validated_at", nullable=True),  # when that check ended (migration 0005)
    # when sched / connectivity last changed: the nodes_state_times trigger (migration 0029)
    ts("sched_changed_at", nullable=True),
    ts("connectivity_changed_at", nullable=True),
    one_of("sched", SchedState),
    one_of("validation", Validation),
    one_of("connectivity", Connectivity),
    CheckConstraint("used_mcpu BETWEEN 0 AND mcpu", name="used_mcpu"),
    CheckConstraint("used_memory_mb BETWEEN 0 AND memory_mb", name="used_memory_mb"),
    CheckConstraint("epoch >= 1", name="epoch"),
    Index("ix_nodes_pool", "pool"),
    # its window of GPU numbers, slot * 64 … slot * 64 + gpus - 1 (migration 0032)
    Column("slot", Integer, Identity(maxvalue=MAX_NODE_SLOT), nullable=False),
    Column("gpus", Integer, nullable=False, server_default="0"),
    CheckConstraint(f"slot BETWEEN 1 AND {MAX_NODE_SLOT}", name="slot"),
    CheckConstraint(f"gpus BETWEEN 0 AND {MAX_GPUS_PER_NODE}", name="gpus"),
    UniqueConstraint("slot"),
    UniqueConstraint("name", "slot", "gpus"),  # the target of reservation_members' foreign key
)

# A node's last connectivity changes (at most 50), written by the nodes_connectivity_history
# trigger in the statement that changed it (migration 0029).
node_connectivity = Table(
    "node_connectivity",
    metadata,
    Column("seq", BigInteger, Identity(), primary_key=True),
    Column("node", Text, ForeignKey("nodes.name", ondelete="CASCADE"), nullable=False),
    ts("at"),
    Column("connectivity", Text, nullable=False),
    one_of("connectivity", Connectivity),
    Index("ix_node_connectivity_node_seq", "node", "seq"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("attempt_id", Text, ForeignKey("attempts.id", ondelete="CASCADE"), primary_key=True),
    Column("job_id", Text, nullable=False),
    Column("queue", Text, nullable=False),
    ts("reserved_at"),
)

reservation_members = Table(
    "reservation_members",
    metadata,
    Column(
        "attempt_id",
        Text,
        ForeignKey("reservations.attempt_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("member", Integer, primary_key=True),
    Column("role", Text, nullable=False),
    Column("node", Text, nullable=False),
    Column("mcpu", Integer, nullable=False),
    Column("memory_mb", Integer, nullable=False),
    # its node's slot and GPU count, copied under the foreign key; its GPUs as numbers of the
    # node's window (migration 0032)
    Column("node_slot", Integer, nullable=False),
    Column("node_gpus", Integer, nullable=False),
    Column("gpus", INT4MULTIRANGE, nullable=False, server_default="{}"),
    ForeignKeyConstraint(
        ["node", "node_slot", "node_gpus"],
        ["nodes.name", "nodes.slot", "nodes.gpus"],
        onupdate="CASCADE",
    ),
    CheckConstraint(
        "gpus <@ int4range(node_slot * 64, node_slot * 64 + node_gpus)", name="gpus_on_node"
    ),
    ExcludeConstraint(("gpus", "&&"), using="gist", name="ex_reservation_members_gpus"),
    Index("ix_reservation_members_node", "node"),
)

profiles = Table(
    "profiles",
    metadata,
    Column("name", Text, primary_key=True),
    Column("request", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
)

# -- the node backend (see adapters/postgres/nodes.py and launches.py) -------------------------

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

# The telemetry, plugin, artifact and timeline tables live in their own modules, on this metadata.
from adapters.postgres import (  # noqa: E402, F401
    artifact_tables,
    plugin_tables,
    telemetry_tables,
    timeline_tables,
    webhook_tables,
)

runtimes = Table(  # the runtime registry (docs/runtimes.md); the built-in runtimes are not here
    "runtimes",
    metadata,
    Column("name", Text, primary_key=True),
    Column("image", Text, nullable=False),
    Column("digest", Text, nullable=False),  # registered runtimes are pinned by digest
    Column("python", Text, nullable=True),  # None: no Python promised
    Column("frameworks", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("process_model", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("added_by", Text, nullable=False),
    ts("added_at"),
    Column("revision", Integer, nullable=False),
    CheckConstraint(
        "process_model IN ('single-process', 'torch-process-group', 'ray', 'cpu')",
        name="process_model",
    ),
    CheckConstraint("digest ~ '^sha256:[0-9a-f]{64}$'", name="digest"),
    CheckConstraint("revision >= 1", name="revision"),
)

# The telemetry tables live in their own module, on this metadata.
