"""PostgreSQL adapters: SQLAlchemy 2 Core on asyncpg, Alembic migrations, an embedded server.

Use from composition roots::

    from adapters.postgres import EmbeddedPostgres, PostgresUnitOfWork, create_engine, migrate
"""

from adapters.postgres import migrate
from adapters.postgres.embedded import EmbeddedPostgres, EmbeddedPostgresError
from adapters.postgres.engine import create_engine
from adapters.postgres.uow import PostgresUnitOfWork

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostgresUnitOfWork",
    "create_engine",
    "migrate",
]
