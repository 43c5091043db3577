"""Room on their pages for the rows a scheduling pass updates in place: ``nodes`` (the used CPU and
memory counters every reservation and release changes) and ``gpu_claims`` (a node window's
mask, changed by every reservation and release once the window has a row) are kept half full
(``fillfactor = 50``), so that the new version of an updated row fits on its page: a HOT update,
which adds no index entry.

Neither update changes an indexed column (``nodes``' indexes hold name, pool and slot;
``gpu_claims``' key is the slot), so only the page's room decided it. With full pages (the
default, 100) every update wrote its new version on another page and a new entry in every index
(four for ``nodes``, one for ``gpu_claims``): when an empty fleet of 1,000 nodes filled, the
counters' update cost the server 12 ms and 577 kB of WAL for 1,000 rows, against 5.5 ms and
144 kB HOT; the masks' updates of a fleet that had reservations 4-8 ms less
(docs/benchmarks.md, "Session 46"). The cost: the two tables take twice the pages (a fleet of
1,000 nodes: about 60 pages instead of 30).

The setting applies to pages written from now on: the rows already there get their room when an
update first moves them to a new page (the migration rewrites nothing and takes no long lock).
The same as migration 0033 did for the telemetry tables updated at every batch.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0038"
down_revision: str | Sequence[str] | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("nodes", "gpu_claims")


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} SET (fillfactor = 50)")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
