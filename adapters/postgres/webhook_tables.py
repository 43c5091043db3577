"""The webhook schema (part of ``tables.metadata``, migration 0026, docs/notifications.md):
subscriptions, and the outbox the ``webhook_outbox_fill`` trigger fills from the job timeline
in the transaction that moved the job (one row per matching subscription and state change)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

from adapters.postgres.tables import metadata, one_of, ts
from domain.webhooks import DeliveryStatus, Format, Scope

webhook_subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("owner", Text, nullable=False),  # who made it
    Column("scope", Text, nullable=False),
    Column("target", Text, nullable=False),  # the user, team or queue
    Column("url", Text, nullable=False),
    Column("states", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("format", Text, nullable=False),
    ts("created_at"),
    # the HMAC key, sealed under the secrets key (migration 0027; notifications.md): never
    # clear here, but in a row from before 0027 (or an older API process), sealed at start
    Column("secret", Text, nullable=True),  # clear: only such a row's, until it is sealed
    Column("sealed_secret", Text, nullable=True),
    CheckConstraint("num_nonnulls(secret, sealed_secret) = 1", name="one_secret"),
    one_of("scope", Scope),
    one_of("format", Format),
    Index("ix_webhook_subscriptions_scope_target", "scope", "target"),
    Index("ix_webhook_subscriptions_owner", "owner"),
)

webhook_outbox = Table(
    "webhook_outbox",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),  # order of insertion
    # → webhook_subscriptions.id ON DELETE CASCADE, kept by statement triggers (migration 0040)
    Column("subscription_id", Text, nullable=False),
    # the change (no foreign key to jobs: an event outlives nothing it must not)
    Column("job_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("previous_state", Text, nullable=True),
    Column("reason", Text, nullable=False, server_default=""),
    Column("owner", Text, nullable=False),
    Column("queue", Text, nullable=False),
    ts("at"),  # when the job moved
    # its delivery, timed by the database's clock
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),  # failed sends
    ts("next_at"),  # due from then (a claim moves it on by its lease)
    ts("created_at"),
    ts("finished_at", nullable=True),  # delivered or dead
    Column("last_status", Integer, nullable=True),  # the receiver's last HTTP status
    Column("last_error", Text, nullable=False, server_default=""),
    one_of("status", DeliveryStatus),
    CheckConstraint("attempts >= 0", name="attempts"),
    Index("ix_webhook_outbox_due", "next_at", postgresql_where=text("status = 'pending'")),
    Index("ix_webhook_outbox_subscription_job_id", "subscription_id", "job_id", "id"),
    Index("ix_webhook_outbox_finished_at", "finished_at"),
)
