"""webhooks (issue 24): subscriptions, and the outbox a trigger on the job timeline fills in the
transaction that moved the job, so no state change is lost or invented (docs/notifications.md)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One outbox row per subscription that wants the change: a user's jobs, a team's queues' jobs,
# a queue's jobs, filtered by state; none for a disabled owner (as their tokens stop). The jobs row is already the moved one (record_job_event
# runs AFTER the jobs statement), so owner, queue and reason are what the job holds now.
# pg_notify is delivered at commit, and not at all on rollback: a wake-up, never a promise.
_FUNCTION = """
CREATE OR REPLACE FUNCTION webhook_outbox_fill() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  j jobs%ROWTYPE;
  team text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM webhook_subscriptions) THEN
    RETURN NULL;  -- no webhook at all: the common case costs one look at an empty table
  END IF;
  SELECT * INTO j FROM jobs WHERE id = NEW.job_id;
  SELECT q.team INTO team FROM queues q WHERE q.name = j.queue;
  INSERT INTO webhook_outbox
    (subscription_id, job_id, seq, state, previous_state, reason, owner, queue, at,
     status, attempts, next_at, created_at)
  SELECT s.id, NEW.job_id, NEW.seq, NEW.state,
         (SELECT p.state FROM job_events p WHERE p.job_id = NEW.job_id AND p.seq = NEW.seq - 1),
         j.reason, j.owner, j.queue, NEW.at, 'pending', 0, now(), now()
  FROM webhook_subscriptions s
  WHERE (s.scope, s.target) IN (('user', j.owner), ('queue', j.queue), ('team', team))
    AND (cardinality(s.states) = 0 OR NEW.state = ANY (s.states))
    AND NOT EXISTS (SELECT 1 FROM users u WHERE u.name = s.owner AND u.disabled)
  ORDER BY s.id;
  IF FOUND THEN
    PERFORM pg_notify('tuneplane_webhook_outbox', '');
  END IF;
  RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column(
            "states", ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False
        ),
        sa.Column("format", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "scope IN ('user', 'team', 'queue')", name=op.f("ck_webhook_subscriptions_scope")
        ),
        sa.CheckConstraint(
            "format IN ('tuneplane', 'slack')", name=op.f("ck_webhook_subscriptions_format")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_subscriptions")),
    )
    op.create_index(
        "ix_webhook_subscriptions_scope_target", "webhook_subscriptions", ["scope", "target"]
    )
    op.create_index("ix_webhook_subscriptions_owner", "webhook_subscriptions", ["owner"])
    op.create_table(
        "webhook_outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("subscription_id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("previous_state", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), server_default="", nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), server_default="", nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'dead')", name=op.f("ck_webhook_outbox_status")
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_webhook_outbox_attempts")),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["webhook_subscriptions.id"],
            name=op.f("fk_webhook_outbox_subscription_id_webhook_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_outbox")),
    )
    op.create_index(
        "ix_webhook_outbox_due",
        "webhook_outbox",
        ["next_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_webhook_outbox_subscription_job_id",
        "webhook_outbox",
        ["subscription_id", "job_id", "id"],
    )
    op.create_index("ix_webhook_outbox_finished_at", "webhook_outbox", ["finished_at"])
    op.execute(_FUNCTION)
    op.execute(
        "CREATE TRIGGER job_events_webhooks AFTER INSERT ON job_events "
        "FOR EACH ROW EXECUTE FUNCTION webhook_outbox_fill()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS job_events_webhooks ON job_events")
    op.execute("DROP FUNCTION IF EXISTS webhook_outbox_fill()")
    op.drop_table("webhook_outbox")
    op.drop_table("webhook_subscriptions")
