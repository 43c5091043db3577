"""reserved GPUs refused twice by a unique index, not by the GiST exclusion constraint:
``gpu_claims`` holds one row per reserved GPU number (``gpu``, its primary key), written only by
statement-level triggers on ``reservation_members``.

The exclusion constraint of migration 0032 (``EXCLUDE USING gist (gpus WITH &&)``) cost about
half of the reserve statement's server time when an empty fleet fills: each of ~1,600 member
rows ran its own GiST scan to look for an overlap (about 25 µs a row; docs/benchmarks.md). A
unique btree insert per GPU (~8,000 a fill, in one ``INSERT … SELECT`` per statement) costs
less than half of that (40 → 18 ms of server CPU for 1,604 members). The guarantees are the same, whoever writes:

* **a GPU is never reserved twice**: a member's GPU numbers (``slot * 64 + index``, migration
  0032) are claimed in the statement that inserts the member; a number claimed already, by a
  committed row or by another row of the same statement, is a unique violation on
  ``pk_gpu_claims``. A concurrent transaction claiming the same number waits for the first one's
  end, then fails or goes on (the unique index's rule, as the exclusion constraint's was).
* **the claims follow the members**: deleting members (a release, the cascade from
  ``reservations``) gives their numbers up; an update of members (the cascade of a node's GPU
  count) gives up the numbers they lost and claims the ones they gained; TRUNCATE empties both.
* **nobody else writes the claims**: a statement-level trigger refuses any statement on
  ``gpu_claims`` that no trigger issued (``pg_trigger_depth()``).

The window CHECK and the foreign key to ``nodes`` (migration 0032) are unchanged. The trigger
functions run with ``jit = off``: a transition table has no statistics, and on a server built
with LLVM the planner's guess made it compile each statement (100 ms or more) for a few
thousand rows.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | Sequence[str] | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# the GPU numbers of the members in transition table {t}, one row each
_NUMBERS = (
    "SELECT i FROM {t} m CROSS JOIN LATERAL unnest(m.gpus) AS x "
    "CROSS JOIN LATERAL generate_series(lower(x), upper(x) - 1) AS i"
)
_INS, _OLD = _NUMBERS.format(t="new_members"), _NUMBERS.format(t="old_members")

_FUNCTIONS = [
    f"""
CREATE FUNCTION gpu_claims_inserted() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
  INSERT INTO gpu_claims (gpu) {_INS};
  RETURN NULL;
END
$$""",
    f"""
CREATE FUNCTION gpu_claims_deleted() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
  DELETE FROM gpu_claims WHERE gpu = ANY (ARRAY({_OLD}));
  RETURN NULL;
END
$$""",
    # numbers as multisets: only what the statement's rows lost is given up and only what they
    # gained is claimed, so a number two new rows both hold is claimed twice (and refused)
    f"""
CREATE FUNCTION gpu_claims_updated() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
BEGIN
  DELETE FROM gpu_claims WHERE gpu = ANY (ARRAY({_OLD} EXCEPT ALL {_INS}));
  INSERT INTO gpu_claims (gpu) {_INS} EXCEPT ALL {_OLD};
  RETURN NULL;
END
$$""",
    """
CREATE FUNCTION gpu_claims_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE gpu_claims;
  RETURN NULL;
END
$$""",
    # depth 1 is this trigger alone: a statement on gpu_claims that no trigger issued
    """
CREATE FUNCTION gpu_claims_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION 'gpu_claims is written by the triggers of reservation_members only'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$$""",
]

_UPGRADE = [
    "CREATE TABLE gpu_claims (gpu integer NOT NULL, CONSTRAINT pk_gpu_claims PRIMARY KEY (gpu))",
    "INSERT INTO gpu_claims (gpu) " + _NUMBERS.format(t="reservation_members"),
    *_FUNCTIONS,
    "CREATE TRIGGER gpu_claims_inserted AFTER INSERT ON reservation_members "
    "REFERENCING NEW TABLE AS new_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_inserted()",
    "CREATE TRIGGER gpu_claims_deleted AFTER DELETE ON reservation_members "
    "REFERENCING OLD TABLE AS old_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_deleted()",
    "CREATE TRIGGER gpu_claims_updated AFTER UPDATE ON reservation_members "
    "REFERENCING OLD TABLE AS old_members NEW TABLE AS new_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_updated()",
    "CREATE TRIGGER gpu_claims_truncated AFTER TRUNCATE ON reservation_members "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpu_claims_truncated()",
    "CREATE TRIGGER gpu_claims_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE "
    "ON gpu_claims FOR EACH STATEMENT EXECUTE FUNCTION gpu_claims_guard()",
    "ALTER TABLE reservation_members DROP CONSTRAINT ex_reservation_members_gpus",
]

_DOWNGRADE = [
    "ALTER TABLE reservation_members ADD CONSTRAINT ex_reservation_members_gpus "
    "EXCLUDE USING gist (gpus WITH &&)",
    "DROP TRIGGER gpu_claims_truncated ON reservation_members",
    "DROP TRIGGER gpu_claims_updated ON reservation_members",
    "DROP TRIGGER gpu_claims_deleted ON reservation_members",
    "DROP TRIGGER gpu_claims_inserted ON reservation_members",
    "DROP TABLE gpu_claims",
    "DROP FUNCTION gpu_claims_guard()",
    "DROP FUNCTION gpu_claims_truncated()",
    "DROP FUNCTION gpu_claims_updated()",
    "DROP FUNCTION gpu_claims_deleted()",
    "DROP FUNCTION gpu_claims_inserted()",
]


def upgrade() -> None:
    for statement in _UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DOWNGRADE:
        op.execute(statement)
