"""PostgreSQL adapters: SQLAlchemy 2 Core on asyncpg, Alembic migrations, an embedded server.

Import each from its module (``adapters.postgres.uow.PostgresUnitOfWork``,
``adapters.postgres.engine.create_engine``, ``adapters.postgres.embedded.EmbeddedPostgres``,
``adapters.postgres.migrate``): this package imports nothing itself, so that a process that
needs only asyncpg (the telemetry gateway: ``connect.py``, ``metrics.py``) loads no SQLAlchemy,
and one that needs a migrated database loads no Alembic (a third of a second each).
"""
