"""PostgreSQL adapters: SQLAlchemy 2 Core on asyncpg, Alembic migrations, an embedded server.

Use from composition roots::

    from adapters.postgres import EmbeddedPostgres, PostgresUnitOfWork, create_engine, migrate

``migrate`` (and with it Alembic, a third of a second) is imported only where it is named: the
API and the gateways need a migrated database, never the migrations.
"""

from adapters.postgres.embedded import EmbeddedPostgres, EmbeddedPostgresError
from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostgresUnitOfWork",
    "create_engine",
]
