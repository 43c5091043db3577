"""The timeline's update trigger pairs each job's old and new row by grouping, not by a join, so
that its plan does not depend on the first statement a connection ran it for.

``record_job_events_updated`` (migration 0031) joined the statement's two transition tables
(``new_jobs JOIN old_jobs ON id``). PL/pgSQL plans that statement once a session, and a
statement with no parameters keeps its plan; the planner sizes a transition table by the rows it
held when the plan was made. So a connection whose first job update moved one job (a cancel, a
supervisor's step: the common case on a pooled connection) kept a nested loop that reads all of
``old_jobs`` for each new row. When that connection later stored a scheduling pass's 1,277
placements, the jobs update cost the server about 230-250 ms of CPU instead of 50-60 ms: the pairs
compared were 1,277 x 1,277 (docs/benchmarks.md, "Session 47").

Now the old and new rows are one ``UNION ALL`` grouped by ``id``: a hash or a sort whatever the
planner believed, never a pair of loops. What it records is unchanged: an update that changes a
job's state is the job's next event (``max(seq) + 1``; the update holds the job's row lock, so
no other transaction computes the same seq), with the new reason if the update changed it, else
``''``; an update that does not change the state records nothing. Each job of the statement has
exactly one old and one new row (a key update is refused by ``fk_job_events_job_id_jobs``), and
``state`` and ``reason`` are never NULL, so ``<>`` and ``IS DISTINCT FROM`` agree.

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0039"
down_revision: str | Sequence[str] | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GROUPED = """
CREATE OR REPLACE FUNCTION record_job_events_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- the UPDATE holds the jobs' row locks: no other transaction computes the same seq. Old and
  -- new rows are paired by grouping, not by a join: the plan PL/pgSQL keeps for the session
  -- is then never a nested loop over the transition tables (migration 0039).
  INSERT INTO job_events (job_id, seq, at, state, reason)
  SELECT c.id,
         coalesce((SELECT max(e.seq) FROM job_events e WHERE e.job_id = c.id), 0) + 1,
         c.at,
         c.state,
         CASE WHEN c.reason <> c.old_reason THEN c.reason ELSE '' END
  FROM (SELECT x.id,
               min(x.at) FILTER (WHERE x.new) AS at,
               min(x.state) FILTER (WHERE x.new) AS state,
               min(x.state) FILTER (WHERE NOT x.new) AS old_state,
               min(x.reason) FILTER (WHERE x.new) AS reason,
               min(x.reason) FILTER (WHERE NOT x.new) AS old_reason
        FROM (SELECT n.id, true AS new, n.updated_at AS at, n.state, n.reason FROM new_jobs n
              UNION ALL
              SELECT o.id, false, NULL, o.state, o.reason FROM old_jobs o) AS x
        GROUP BY x.id) AS c
  WHERE c.state <> c.old_state;
  RETURN NULL;
END
$$
"""

# migration 0031's function
_JOINED = """
CREATE OR REPLACE FUNCTION record_job_events_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- the UPDATE holds the jobs' row locks: no other transaction computes the same seq
  INSERT INTO job_events (job_id, seq, at, state, reason)
  SELECT n.id,
         coalesce((SELECT max(e.seq) FROM job_events e WHERE e.job_id = n.id), 0) + 1,
         n.updated_at,
         n.state,
         CASE WHEN n.reason IS DISTINCT FROM o.reason THEN n.reason ELSE '' END
  FROM new_jobs n JOIN old_jobs o ON o.id = n.id
  WHERE n.state IS DISTINCT FROM o.state;
  RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.execute(_GROUPED)


def downgrade() -> None:
    op.execute(_JOINED)
