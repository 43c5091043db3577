"""GPU claims as one bit mask per node window: ``gpu_claims`` holds one row per slot (``slot``,
its primary key) with the GPUs claimed there as the bits of a ``bigint`` (``bits``: bit ``i`` is
GPU number ``slot * 64 + i``), instead of one row per claimed GPU number (migration 0035).

When an empty fleet of 1,000 nodes fills, 0035's triggers inserted about 8,000 claim rows, each
a btree insert (about 20 ms of the server's CPU; docs/benchmarks.md, session 44). Here the same
statement writes one row per node window it touches (1,000), and a node whose row exists already
(every node after its first reservation: a released mask stays, at 0) gets an update of a column
no index holds. The guarantees are the same, whoever writes:

* **a GPU is never reserved twice**: the statement that inserts members ORs their GPUs into their
  windows' masks with ``INSERT … ON CONFLICT (slot) DO UPDATE … WHERE`` the mask held and the
  new bits do not meet. A window whose row was not written (its bits met) refuses the statement,
  and so does a window two rows of the statement both hold a GPU of (the new bits, counted,
  fewer than the GPUs given): ``unique_violation`` naming ``pk_gpu_claims``, as before. The upsert
  takes the row's lock: a concurrent writer of the same window waits for the first transaction's
  end, then sees its bits (or, if it rolled back, goes on). Windows are written in slot order.
* **the claims follow the members**: deleting members (a release, the cascade from
  ``reservations``) clears their bits; an update of members (the cascade of a node's GPU count,
  a changed set) clears the old rows' bits, then claims the new rows' as an insert does;
  TRUNCATE empties the claims.
* **nobody else writes the claims**: the statement guard of 0035 (``pg_trigger_depth()``).

A member's set lies in its node's window (``ck_reservation_members_gpus_on_node``, checked before
these AFTER triggers run), so each of its ranges lies in one window: ``lower >> 6`` is the slot,
``lower & 63`` the first bit. The functions run with ``jit = off``, as 0035's.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from importlib import import_module

from alembic import op

revision: str = "0037"
down_revision: str | Sequence[str] | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# each range of each member in {t}: its window, its bits there and how many GPUs it holds (a
# range of 64 is the whole mask, -1: a shift by 64 is not defined)
_RANGES = (
    "SELECT lower(x) >> 6 AS slot, upper(x) - lower(x) AS n, "
    "(CASE WHEN upper(x) - lower(x) >= 64 THEN CAST(-1 AS bigint) "
    "      ELSE ~(CAST(-1 AS bigint) << (upper(x) - lower(x))) END) << (lower(x) & 63) AS bits "
    "FROM {t} m CROSS JOIN LATERAL unnest(m.gpus) AS x"
)
# the statement's bits per window; ``n`` the GPUs its rows gave there (more than the bits set
# when two rows hold one GPU)
_WINDOWS = "SELECT slot, bit_or(bits) AS bits, sum(n) AS n FROM ({r}) AS r GROUP BY slot"

# claim what the rows of {t} hold: each window's bits ORed into its mask when they meet none of
# it; a window that two rows share a GPU of, or whose mask holds one of its bits, is not written
_CLAIM = """
  WITH w AS ({w}),
  up AS (INSERT INTO gpu_claims AS c (slot, bits)
         SELECT slot, bits FROM w WHERE bit_count(CAST(bits AS bit(64))) = n ORDER BY slot
         ON CONFLICT (slot) DO UPDATE SET bits = c.bits | excluded.bits
         WHERE c.bits & excluded.bits = 0
         RETURNING c.slot)
  SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM up) INTO wanted, written;
  IF written < wanted THEN
    RAISE EXCEPTION 'duplicate key value violates unique constraint "pk_gpu_claims"'
      USING ERRCODE = 'unique_violation', CONSTRAINT = 'pk_gpu_claims', TABLE = 'gpu_claims',
            DETAIL = format('%s of %s node windows: a GPU is claimed already or twice',
                            wanted - written, wanted);
  END IF;"""
# give up what the rows of {t} held
_FREE = """
  UPDATE gpu_claims c SET bits = c.bits & ~w.bits FROM ({w}) AS w WHERE c.slot = w.slot;"""


# as 0036's checks: the plan PL/pgSQL keeps probes the key a window, whatever the table's size
# when it was made
_PROBES = (
    " SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off"
)


def _claim(t: str) -> str:
    return _CLAIM.format(w=_WINDOWS.format(r=_RANGES.format(t=t)))


def _free(t: str) -> str:
    return _FREE.format(w=_WINDOWS.format(r=_RANGES.format(t=t)))


_FUNCTIONS = [
    f"""
CREATE FUNCTION gpu_claims_inserted() RETURNS trigger LANGUAGE plpgsql SET jit = off AS $$
DECLARE wanted bigint; written bigint;
BEGIN{_claim("new_members")}
  RETURN NULL;
END
$$""",
    f"""
CREATE FUNCTION gpu_claims_deleted() RETURNS trigger LANGUAGE plpgsql{_PROBES} AS $$
BEGIN{_free("old_members")}
  RETURN NULL;
END
$$""",
    # the old rows' bits cleared first: a row keeping its GPUs claims them again
    f"""
CREATE FUNCTION gpu_claims_updated() RETURNS trigger LANGUAGE plpgsql{_PROBES} AS $$
DECLARE wanted bigint; written bigint;
BEGIN{_free("old_members")}{_claim("new_members")}
  RETURN NULL;
END
$$""",
]

_CLAIMED_FUNCTIONS = ("inserted", "deleted", "updated")
_DROP_OLD = [
    *(f"DROP FUNCTION gpu_claims_{f}() CASCADE" for f in _CLAIMED_FUNCTIONS),
    "DROP TABLE gpu_claims",
]
_TRIGGERS = [
    "CREATE TRIGGER gpu_claims_inserted AFTER INSERT ON reservation_members "
    "REFERENCING NEW TABLE AS new_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_inserted()",
    "CREATE TRIGGER gpu_claims_deleted AFTER DELETE ON reservation_members "
    "REFERENCING OLD TABLE AS old_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_deleted()",
    "CREATE TRIGGER gpu_claims_updated AFTER UPDATE ON reservation_members "
    "REFERENCING OLD TABLE AS old_members NEW TABLE AS new_members FOR EACH STATEMENT "
    "EXECUTE FUNCTION gpu_claims_updated()",
]
_GUARD = (
    "CREATE TRIGGER gpu_claims_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE "
    "ON gpu_claims FOR EACH STATEMENT EXECUTE FUNCTION gpu_claims_guard()"
)

_UPGRADE = [
    *_DROP_OLD,  # the guard's trigger goes with the table; its function stays
    "CREATE TABLE gpu_claims (slot integer NOT NULL, bits bigint NOT NULL, "
    "CONSTRAINT pk_gpu_claims PRIMARY KEY (slot))",
    # the members there hold no GPU twice (0035's claims refused it)
    "INSERT INTO gpu_claims (slot, bits) SELECT slot, bits FROM ("
    + _WINDOWS.format(r=_RANGES.format(t="reservation_members"))
    + ") AS w",
    *_FUNCTIONS,
    *_TRIGGERS,
    _GUARD,
]


def _downgrade() -> list[str]:
    """0035's table, functions and triggers again (its own statements), its numbers claimed
    from the members there."""
    m0035 = import_module("adapters.postgres.migrations.versions.0035_gpu_claims")
    create_table, fill = m0035._UPGRADE[0], m0035._UPGRADE[1]
    functions = m0035._FUNCTIONS[:3]  # the truncate and guard functions stay as they are
    return [*_DROP_OLD, create_table, fill, *functions, *_TRIGGERS, _GUARD]


def upgrade() -> None:
    for statement in _UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in _downgrade():
        op.execute(statement)
