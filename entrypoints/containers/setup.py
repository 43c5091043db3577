"""The container of `tp up`'s set-up steps (the first admin token, the fleet's defaults, the local
node's join token): PostgreSQL's repositories and nothing else, started once for all of them."""

from __future__ import annotations

from dependency_injector import containers, providers
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from adapters.system import RandomIds, SystemClock, new_secret
from application.context import Context
from entrypoints.containers.sql_engine import database_engine
from entrypoints.settings import Settings


def _context(settings: Settings, engine: AsyncEngine) -> Context:
    return Context(
        uow=lambda: PostgresUnitOfWork(engine),
        clock=SystemClock(),
        ids=RandomIds(),
        new_secret=new_secret,
        limits=settings.limits,
    )


class SetupContainer(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    engine = providers.Resource(database_engine, settings=settings)
    context = providers.Singleton(_context, settings=settings, engine=engine)
