"""The statement-level foreign-key checks of migration 0036 no longer lock parents that this
transaction wrote itself: only the others are locked ``FOR KEY SHARE``.

A check locks each parent of a statement's children so that a concurrent delete of the parent
waits for the child's transaction and then sees the child (cascade or refusal). When the
transaction wrote the parent's visible version itself (``xmin`` is the transaction's id: it
inserted the row, or updated it), that wait already happens: a concurrent delete meets the
version's writer (an uncommitted update's ``xmax``, or a row it cannot see yet) and waits for
the transaction's end, then its own check runs on a new snapshot that holds the child. The lock
adds nothing there and costs a tuple lock (a WAL record, a dirtied page) a parent. Every parent
of a scheduling pass's store is such a row: the jobs it moved, the attempts and reservations it
inserted, the nodes whose counters it raised in the same statement (docs/benchmarks.md, session
44: about 10 ms of the server's 115 ms for the fill store).

Each key's ``<constraint>_inserted`` function counts the statement's distinct keys and, in the
same probe, those whose parent this transaction wrote; when they are all such, it returns. Else
it locks the others as before and refuses the statement when a key has no parent. A parent
written in a subtransaction has the subtransaction's id: it is locked, as before. Nothing else
changes (cascades, refusals, messages, the row trigger for key updates). Not covered: a frozen
parent whose raw ``xmin`` equals this transaction's id modulo 2^32 (docs/persistence.md).

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from importlib import import_module
from typing import Any

from alembic import op

revision: str = "0038"
down_revision: str | Sequence[str] | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_M0036 = import_module("adapters.postgres.migrations.versions.0036_statement_foreign_keys")


def _inserted(k: Any) -> str:
    """0036's ``<key>_inserted``, the parents this transaction wrote left unlocked (``k``: one
    of 0036's keys)."""
    name, cols, parent, pcols, child = k.name, k.columns, k.parent, k.keys, k.child
    not_null = " AND ".join(f"c.{c} IS NOT NULL" for c in cols)  # MATCH SIMPLE
    keys = f"SELECT DISTINCT {', '.join(cols)} FROM new_rows c WHERE {not_null}"
    on = " AND ".join(f"p.{p} = k.{c}" for c, p in zip(cols, pcols, strict=True))
    missing = (
        f"SELECT format('Key ({', '.join(cols)})=(%s) is not present in table \"{parent}\".', "
        f"concat_ws(', ', {', '.join('c.' + c for c in cols)})) INTO detail FROM new_rows c "
        f"WHERE {not_null} AND NOT EXISTS (SELECT 1 FROM {parent} p "
        f"WHERE {_M0036._row('p', pcols)} = {_M0036._row('c', cols)}) LIMIT 1"
    )
    insert_msg = f'insert or update on table "{child}" violates foreign key constraint "{name}"'
    return f"""
CREATE OR REPLACE FUNCTION {name}_inserted() RETURNS trigger LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
  AS $$
DECLARE wanted bigint; mine bigint; locked bigint; detail text;
  me xid := CAST(pg_current_xact_id() AS xid);
BEGIN
  -- one index probe a key: the keys, and those whose parent this transaction wrote
  SELECT count(*), count(*) FILTER (WHERE p.xmin = me) INTO wanted, mine
    FROM ({keys}) k LEFT JOIN {parent} p ON {on};
  IF mine = wanted THEN RETURN NULL; END IF;
  SELECT count(*) INTO locked FROM (SELECT 1 FROM {parent} p JOIN ({keys}) k ON {on}
    WHERE p.xmin <> me FOR KEY SHARE OF p) s;
  IF locked + mine < wanted THEN
    {missing};
    {_M0036._raise(k, insert_msg, "detail")};
  END IF;
  RETURN NULL;
END
$$"""


def upgrade() -> None:
    for key in _M0036.KEYS:
        op.execute(_inserted(key))


def downgrade() -> None:
    for key in _M0036.KEYS:
        function = _M0036._functions(key)[0]
        op.execute(function.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
