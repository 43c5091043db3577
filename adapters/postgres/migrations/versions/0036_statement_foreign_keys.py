"""The six foreign keys that a scheduling pass's store checks row by row become statement-level
checks over transition tables: ``attempts → jobs``, ``members → attempts``, ``reservations →
attempts``, ``reservation_members → reservations``, ``reservation_members → nodes`` and
``job_events → jobs``.

A foreign key checks each inserted row on its own: one query (``SELECT 1 FROM parent WHERE key
= $1 FOR KEY SHARE``) a row, run from the trigger queue at the statement's end. When an empty
fleet fills, the store inserts about 8,400 child rows in two statements, and these checks cost
about 48 ms of the server's CPU (docs/benchmarks.md, session 41). Here each constraint is kept
by triggers named after it (``<constraint>_...``) with the same guarantees, whoever writes:

* **no orphan child**: a statement inserting children locks their parents ``FOR KEY SHARE`` in
  one query (the distinct keys as one array, one index scan) and refuses the statement
  (``foreign_key_violation``, with the constraint's name) when fewer parents were locked than
  keys were given. An update of a child's key is checked the same way, row by row (a row trigger
  with a ``WHEN`` that fires only when the key changed: the app never changes one).
* **a parent's delete** cascades to its children in one ``DELETE`` a statement (the five
  ``ON DELETE CASCADE`` keys), or is refused when children remain (``reservation_members →
  nodes``, ``NO ACTION``). **A parent's key update** with children is refused (``NO ACTION``),
  or cascades onto them (``nodes``: ``ON UPDATE CASCADE``, a node's GPU count). **TRUNCATE** of
  a parent is refused while its child table has rows (the foreign key refused it too; ``TRUNCATE
  … CASCADE`` no longer reaches these children, it is refused instead).
* **the race**: under READ COMMITTED (the only level the app uses), a child insert's lock makes
  a concurrent delete of its parent wait; that delete's own check then runs on a new snapshot
  and sees the child (cascade or refusal). A delete that came first makes the child's lock wait,
  then find no parent: refused. A REPEATABLE READ or SERIALIZABLE deleter does not see a child
  committed after its snapshot, which the foreign key's cross-check did; no writer uses them.

The check functions run with ``jit = off``, as migration 0035's do (a transition table has no
statistics), and with sequential scans, hash and merge joins off: PL/pgSQL keeps a statement's
plan for the session, and a plan made while a parent table was nearly empty (a hash join over
a scan of the whole table) would stay while the table grows; every key has an index, so each
key is one index probe, whatever the statistics said then. (The settings hold for what a
cascade's ``DELETE`` runs in turn, such as 0035's claims trigger: index lookups as well.) Downgrading adds the foreign keys back (validating
the rows there).

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from typing import NamedTuple

from alembic import op

revision: str = "0036"
down_revision: str | Sequence[str] | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


class _Key(NamedTuple):
    name: str  # the constraint's name, kept for errors and as the triggers' prefix
    child: str
    columns: tuple[str, ...]
    parent: str
    keys: tuple[str, ...]
    on_delete: str  # CASCADE or NO ACTION
    on_update: str


KEYS = (
    _Key("fk_attempts_job_id_jobs", "attempts", ("job_id",), "jobs", ("id",), "CASCADE", "NO ACTION"),
    _Key("fk_members_attempt_id_attempts", "members", ("attempt_id",), "attempts", ("id",), "CASCADE", "NO ACTION"),
    _Key("fk_reservations_attempt_id_attempts", "reservations", ("attempt_id",), "attempts", ("id",), "CASCADE", "NO ACTION"),
    _Key("fk_reservation_members_attempt_id_reservations", "reservation_members", ("attempt_id",), "reservations", ("attempt_id",), "CASCADE", "NO ACTION"),
    _Key("fk_reservation_members_node_nodes", "reservation_members", ("node", "node_slot", "node_gpus"), "nodes", ("name", "slot", "gpus"), "NO ACTION", "CASCADE"),
    _Key("fk_job_events_job_id_jobs", "job_events", ("job_id",), "jobs", ("id",), "CASCADE", "NO ACTION"),
)  # fmt: skip


def _row(prefix: str, columns: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{prefix}.{c}" for c in columns) + ")"


def _differs(columns: tuple[str, ...]) -> str:
    return " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)


def _raise(key: _Key, message: str, detail: str) -> str:
    return (
        f"RAISE EXCEPTION '{message}' USING ERRCODE = 'foreign_key_violation', "
        f"CONSTRAINT = '{key.name}', TABLE = '{key.child}', DETAIL = {detail}"
    )


def _functions(key: _Key) -> list[str]:
    k = key
    first, cols, pcols = k.keys[0], k.columns, k.keys
    assert k.on_delete == "NO ACTION" or len(cols) == 1  # a cascade by its one column
    not_null = " AND ".join(f"c.{c} IS NOT NULL" for c in cols)  # MATCH SIMPLE
    # the parents of the statement's children, each locked once: a join with the distinct keys,
    # one index probe a key (the functions' settings below)
    keys = f"SELECT DISTINCT {', '.join(cols)} FROM new_rows c WHERE {not_null}"
    on = " AND ".join(f"p.{p} = k.{c}" for c, p in zip(cols, pcols, strict=True))
    lock = f"SELECT count(*) FROM (SELECT 1 FROM {k.parent} p JOIN ({keys}) k ON {on} FOR KEY SHARE OF p) s"
    missing = (
        f"SELECT format('Key ({', '.join(cols)})=(%s) is not present in table \"{k.parent}\".', "
        f"concat_ws(', ', {', '.join('c.' + c for c in cols)})) FROM new_rows c WHERE {not_null} "
        f"AND NOT EXISTS (SELECT 1 FROM {k.parent} p WHERE {_row('p', pcols)} = {_row('c', cols)}) LIMIT 1"
    )
    insert_msg = f'insert or update on table "{k.child}" violates foreign key constraint "{k.name}"'
    still = f"'Key ({', '.join(pcols)}) is still referenced from table \"{k.child}\".'"
    absent = f"'Key ({', '.join(cols)}) is not present in table \"{k.parent}\".'"
    new_key = _row("NEW", cols)
    old_key = _row("OLD", pcols)
    children_of_old = f"SELECT 1 FROM {k.child} c WHERE {_row('c', cols)} = {old_key}"
    delete_msg = f'update or delete on table "{k.parent}" violates foreign key constraint "{k.name}" on table "{k.child}"'
    if k.on_delete == "CASCADE":
        deleted = (
            f"DELETE FROM {k.child} c USING (SELECT DISTINCT o.{first} FROM old_rows o) o "
            f"WHERE c.{cols[0]} = o.{first}"
        )
    else:  # NO ACTION: children of a key that no row holds any more
        deleted = (
            f"SELECT format('Key ({', '.join(pcols)})=(%s) is still referenced from table \"{k.child}\".', "
            f"concat_ws(', ', {', '.join('c.' + c for c in cols)})) INTO detail FROM {k.child} c "
            f"JOIN (SELECT DISTINCT {', '.join(pcols)} FROM old_rows) o "
            f"ON {' AND '.join(f'c.{c} = o.{p}' for c, p in zip(cols, pcols, strict=True))} "
            f"WHERE NOT EXISTS (SELECT 1 FROM {k.parent} p WHERE {_row('p', pcols)} = {_row('c', cols)}) LIMIT 1;\n"
            f"  IF FOUND THEN {_raise(k, delete_msg, 'detail')}; END IF"
        )
    if k.on_update == "CASCADE":
        updated = (
            f"UPDATE {k.child} c SET {', '.join(f'{c} = NEW.{p}' for c, p in zip(cols, pcols, strict=True))} "
            f"WHERE {_row('c', cols)} = {old_key}"
        )
    else:
        updated = (
            f"IF EXISTS ({children_of_old}) AND NOT EXISTS (SELECT 1 FROM {k.parent} p "
            f"WHERE {_row('p', pcols)} = {old_key}) THEN "
            f"{_raise(k, delete_msg, still)}; END IF"
        )
    return [
        f"""
CREATE FUNCTION {k.name}_inserted() RETURNS trigger LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
  AS $$
DECLARE wanted bigint; locked bigint; detail text;
BEGIN
  SELECT count(*) INTO wanted FROM ({keys}) k;
  IF wanted = 0 THEN RETURN NULL; END IF;
  {lock.replace('SELECT count(*) FROM', 'SELECT count(*) INTO locked FROM', 1)};
  IF locked < wanted THEN
    {missing.replace(' FROM new_rows c WHERE', ' INTO detail FROM new_rows c WHERE', 1)};
    {_raise(k, insert_msg, 'detail')};
  END IF;
  RETURN NULL;
END
$$""",
        f"""
CREATE FUNCTION {k.name}_changed() RETURNS trigger LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
  AS $$
BEGIN
  PERFORM 1 FROM {k.parent} p WHERE {_row('p', pcols)} = {new_key} FOR KEY SHARE OF p;
  IF NOT FOUND THEN
    {_raise(k, insert_msg, absent)};
  END IF;
  RETURN NULL;
END
$$""",
        f"""
CREATE FUNCTION {k.name}_deleted() RETURNS trigger LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
  AS $$
DECLARE detail text;
BEGIN
  {deleted};
  RETURN NULL;
END
$$""",
        f"""
CREATE FUNCTION {k.name}_key_updated() RETURNS trigger LANGUAGE plpgsql
  SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
  AS $$
BEGIN
  {updated};
  RETURN NULL;
END
$$""",
        f"""
CREATE FUNCTION {k.name}_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM {k.child}) THEN
    RAISE EXCEPTION 'cannot truncate a table referenced in a foreign key constraint'
      USING ERRCODE = 'feature_not_supported', CONSTRAINT = '{k.name}',
            DETAIL = 'Table "{k.child}" references "{k.parent}".';
  END IF;
  RETURN NULL;
END
$$""",
    ]


def _triggers(key: _Key) -> list[str]:
    k = key
    return [
        f"CREATE TRIGGER {k.name}_inserted AFTER INSERT ON {k.child} "
        f"REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {k.name}_inserted()",
        f"CREATE TRIGGER {k.name}_changed AFTER UPDATE ON {k.child} FOR EACH ROW "
        f"WHEN (({_differs(k.columns)}) AND {' AND '.join(f'NEW.{c} IS NOT NULL' for c in k.columns)}) "
        f"EXECUTE FUNCTION {k.name}_changed()",
        f"CREATE TRIGGER {k.name}_deleted AFTER DELETE ON {k.parent} "
        f"REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {k.name}_deleted()",
        f"CREATE TRIGGER {k.name}_key_updated AFTER UPDATE ON {k.parent} FOR EACH ROW "
        f"WHEN ({_differs(k.keys)}) EXECUTE FUNCTION {k.name}_key_updated()",
        f"CREATE TRIGGER {k.name}_truncated AFTER TRUNCATE ON {k.parent} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {k.name}_truncated()",
    ]


_SUFFIXES = ("inserted", "changed", "deleted", "key_updated", "truncated")


def _foreign_key(key: _Key) -> str:
    k = key
    return (
        f"ALTER TABLE {k.child} ADD CONSTRAINT {k.name} FOREIGN KEY ({', '.join(k.columns)}) "
        f"REFERENCES {k.parent} ({', '.join(k.keys)}) "
        f"ON DELETE {k.on_delete} ON UPDATE {k.on_update}"
    )


def upgrade() -> None:
    for key in KEYS:
        op.execute(f"ALTER TABLE {key.child} DROP CONSTRAINT {key.name}")
        for statement in (*_functions(key), *_triggers(key)):
            op.execute(statement)


def downgrade() -> None:
    for key in KEYS:
        for suffix, table in zip(_SUFFIXES, (key.child, key.child, *[key.parent] * 3), strict=True):
            op.execute(f"DROP TRIGGER {key.name}_{suffix} ON {table}")
            op.execute(f"DROP FUNCTION {key.name}_{suffix}()")
        op.execute(_foreign_key(key))
