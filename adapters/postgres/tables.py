"""The schema, as SQLAlchemy Core tables. Migrations must produce exactly this (a test checks).

Idempotency lives in constraints: ``submissions`` has one row per retry key (primary key), per
preview (``uq_submissions_preview_id``) and per job (``uq_submissions_job_id``), and ``jobs``
one row per preview (``uq_jobs_preview_id``).

So does the safety of reservations: each node owns a window of 64 numbers on one line of GPU
numbers (``nodes.slot * 64 + gpu_index``); a reservation member's GPUs are a set of those
numbers (``reservation_members.gpus``, an ``int4multirange``), and each reserved number is a
bit of its window's row of ``gpu_claims`` (migration 0037; a row per number under a primary key
in 0035), written by statement triggers on ``reservation_members`` only: a double-booked GPU
is impossible, whoever
writes; a CHECK keeps the set inside its node's window and below its GPU count, copied
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
    INT4MULTIRANGE,
    JSONB,
)

from domain.auth import Role
from domain.fleet import MAX_GPUS_PER_NODE, Connectivity, SchedState, Validation
from domain.lifecycle import AttemptState, JobState, MemberState

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
    # GET /v1/jobs?state=…&queue=…: without it that listing reads every job of the state or of
    # the queue (tests/integration/test_job_listing_plans.py; benchmarks.md, session 46)
    Index("ix_jobs_state_queue_created_at_id", "state", "queue", "created_at", "id"),
    Index("ix_jobs_queue_created_at_id", "queue", "created_at", "id"),  # GET /v1/jobs?queue=
    Index("ix_jobs_changed", "changed"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Text, primary_key=True),
    # → jobs.id ON DELETE CASCADE, kept by statement triggers (migration 0036)
    Column("job_id", Text, nullable=False),
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
    # → attempts.id ON DELETE CASCADE, kept by statement triggers (migration 0036)
    Column("attempt_id", Text, nullable=False),
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
    # → attempts.id ON DELETE CASCADE, kept by statement triggers (migration 0036)
    Column("attempt_id", Text, primary_key=True),
    Column("job_id", Text, nullable=False),
    Column("queue", Text, nullable=False),
    ts("reserved_at"),
)

reservation_members = Table(
    "reservation_members",
    metadata,
    # → reservations.attempt_id ON DELETE CASCADE, kept by statement triggers (migration 0036)
    Column("attempt_id", Text, primary_key=True),
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
    # (node, node_slot, node_gpus) → nodes (name, slot, gpus) ON UPDATE CASCADE: kept by
    # statement triggers (migration 0036)
    CheckConstraint(
        "gpus <@ int4range(node_slot * 64, node_slot * 64 + node_gpus)", name="gpus_on_node"
    ),
    Index("ix_reservation_members_node", "node"),
)

# One row per node window (``slot``) holding its claimed GPUs as bits (bit ``i``: GPU number
# ``slot * 64 + i``); a claim whose bits meet the mask's is refused (migration 0037; one row
# per GPU number under its primary key in 0035). Written only by reservation_members' statement
# triggers.
gpu_claims = Table(
    "gpu_claims",
    metadata,
    Column("slot", Integer, primary_key=True, autoincrement=False),
    Column("bits", BigInteger, nullable=False),
)

profiles = Table(
    "profiles",
    metadata,
    Column("name", Text, primary_key=True),
    Column("request", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
)

# The node backend's, telemetry, plugin, artifact and timeline tables live in their own
# modules, on this metadata.
from adapters.postgres import (  # noqa: E402, F401
    artifact_tables,
    node_tables,
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
