"""The webhook outbox filled per statement: ``job_events_webhooks`` becomes a statement-level
trigger with a transition table (``REFERENCING NEW TABLE``), like the timeline's own triggers
since migration 0031.

Before, every timeline event ran a PL/pgSQL call and, when any webhook exists, four queries (the
job, its queue's team, the previous event, the subscriptions). A scheduling pass records one
event per placed job in one statement (about 1,300 when an empty fleet fills), so the trigger
ran 1,300 times. Now one ``INSERT … SELECT`` joins the statement's new events to their jobs,
queues and the subscriptions that want them. What it writes is unchanged: one outbox row per
(event, subscription that wants it), in the transaction that recorded the event, none for a
disabled owner; rows are inserted in (job, seq, subscription) order, so each (subscription,
job)'s rows keep the order of the job's events (the deliverer sends the oldest first).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | Sequence[str] | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The jobs rows are already the moved ones (the timeline is recorded AFTER the jobs statement),
# so owner, queue and reason are what each job holds now. pg_notify is delivered at commit, and
# not at all on rollback: a wake-up, never a promise.
_STATEMENT = """
CREATE OR REPLACE FUNCTION webhook_outbox_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM webhook_subscriptions) THEN
    RETURN NULL;  -- no webhook at all: the common case costs one look at an empty table
  END IF;
  INSERT INTO webhook_outbox
    (subscription_id, job_id, seq, state, previous_state, reason, owner, queue, at,
     status, attempts, next_at, created_at)
  SELECT s.id, e.job_id, e.seq, e.state,
         (SELECT p.state FROM job_events p WHERE p.job_id = e.job_id AND p.seq = e.seq - 1),
         j.reason, j.owner, j.queue, e.at, 'pending', 0, now(), now()
  FROM new_events e
  JOIN jobs j ON j.id = e.job_id
  LEFT JOIN queues q ON q.name = j.queue
  JOIN webhook_subscriptions s
    ON (s.scope, s.target) IN (('user', j.owner), ('queue', j.queue), ('team', q.team))
  WHERE (cardinality(s.states) = 0 OR e.state = ANY (s.states))
    AND NOT EXISTS (SELECT 1 FROM users u WHERE u.name = s.owner AND u.disabled)
  ORDER BY e.job_id, e.seq, s.id;
  IF FOUND THEN
    PERFORM pg_notify('tuneplane_webhook_outbox', '');
  END IF;
  RETURN NULL;
END
$$
"""

# migration 0026's row-level function, restored by the downgrade
_ROW = """
CREATE OR REPLACE FUNCTION webhook_outbox_fill() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  j jobs%ROWTYPE;
  team text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM webhook_subscriptions) THEN
    RETURN NULL;
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
    op.execute("DROP TRIGGER job_events_webhooks ON job_events")
    op.execute(_STATEMENT)
    op.execute(
        "CREATE TRIGGER job_events_webhooks AFTER INSERT ON job_events "
        "REFERENCING NEW TABLE AS new_events "
        "FOR EACH STATEMENT EXECUTE FUNCTION webhook_outbox_fill()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER job_events_webhooks ON job_events")
    op.execute(_ROW)
    op.execute(
        "CREATE TRIGGER job_events_webhooks AFTER INSERT ON job_events "
        "FOR EACH ROW EXECUTE FUNCTION webhook_outbox_fill()"
    )
