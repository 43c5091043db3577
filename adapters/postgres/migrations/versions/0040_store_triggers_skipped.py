"""Two row-by-row costs of a scheduling pass's store, each kept for whoever writes:

* ``jobs_changed`` (migration 0031), the ``BEFORE UPDATE`` trigger that sets ``jobs.changed`` to
  the writing transaction's id, is called only when the row does not already hold that id
  (``WHEN (NEW.changed IS DISTINCT FROM <the transaction's id>)``, evaluated without calling the
  function). The scheduler's store sets ``changed`` itself in its jobs update
  (adapters/postgres/scheduling.py), so the 1,277 PL/pgSQL calls of a pass that fills an empty
  fleet are skipped; every other writer is unchanged (the trigger still sets the value), and a
  writer that sets another value has it replaced, as before.
* the outbox's foreign key ``webhook_outbox → webhook_subscriptions`` (``ON DELETE CASCADE``)
  is kept by statement triggers, as migration 0036's six keys are (the same generated functions
  and triggers, the same guarantees: an outbox row of a missing subscription is refused, a
  subscription's delete cascades to its rows in one ``DELETE``, a key update with rows is
  refused, ``TRUNCATE`` of the subscriptions is refused while the outbox has rows). A pass that
  records 1,277 events when a webhook wants them made 1,277 key checks, one query each.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-07
"""

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0040"
down_revision: str | Sequence[str] | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# migration 0036's generator of a key's functions and triggers (a migration is never changed
# once released, so what it generates here is what it generated there)
_keys = importlib.import_module(
    "adapters.postgres.migrations.versions.0036_statement_foreign_keys"
)
OUTBOX_KEY = _keys._Key(
    "fk_webhook_outbox_subscription_id_webhook_subscriptions",
    "webhook_outbox",
    ("subscription_id",),
    "webhook_subscriptions",
    ("id",),
    "CASCADE",
    "NO ACTION",
)
XACT = "(pg_current_xact_id())::text::bigint"  # as migration 0031's


def upgrade() -> None:
    op.execute("DROP TRIGGER jobs_changed ON jobs")
    op.execute(
        "CREATE TRIGGER jobs_changed BEFORE UPDATE ON jobs FOR EACH ROW "
        f"WHEN (NEW.changed IS DISTINCT FROM {XACT}) EXECUTE FUNCTION jobs_changed()"
    )
    key = OUTBOX_KEY
    op.execute(f"ALTER TABLE {key.child} DROP CONSTRAINT {key.name}")
    for statement in (*_keys._functions(key), *_keys._triggers(key)):
        op.execute(statement)


def downgrade() -> None:
    key = OUTBOX_KEY
    tables = (key.child, key.child, key.parent, key.parent, key.parent)
    for suffix, table in zip(_keys._SUFFIXES, tables, strict=True):
        op.execute(f"DROP TRIGGER {key.name}_{suffix} ON {table}")
        op.execute(f"DROP FUNCTION {key.name}_{suffix}()")
    op.execute(_keys._foreign_key(key))
    op.execute("DROP TRIGGER jobs_changed ON jobs")
    op.execute(
        "CREATE TRIGGER jobs_changed BEFORE UPDATE ON jobs FOR EACH ROW "
        "EXECUTE FUNCTION jobs_changed()"
    )
