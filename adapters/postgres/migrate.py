"""Schema migrations from code (no alembic.ini): ``upgrade(url)`` at start-up, and a small CLI.

    python -m adapters.postgres.migrate upgrade [--url URL] [REVISION]
    python -m adapters.postgres.migrate downgrade [--url URL] REVISION
    python -m adapters.postgres.migrate current [--url URL]
    python -m adapters.postgres.migrate revision -m "add widgets" [--url URL]   # autogenerate

The URL defaults to TUNEPLANE_DATABASE_URL. The blocking functions may be called with or
without a running event loop (with one, they run on a helper thread); async code should
prefer the ``*_async`` variants.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.engine import create_engine
from adapters.postgres.errors import translated

SCRIPTS = Path(__file__).parent / "migrations"
_ALEMBIC = threading.Lock()
T = TypeVar("T")


def config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = connection
    return cfg


def revisions() -> list[str]:
    """Every revision id, oldest first."""
    script = ScriptDirectory.from_config(config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def head() -> str:
    heads = ScriptDirectory.from_config(config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {heads}")
    return heads[0]


async def _with_connection(
    target: str | AsyncEngine, fn: Callable[[Connection], T], what: str
) -> T:
    # Alembic keeps its context in module globals: one command at a time per process (other
    # processes are kept apart by the advisory lock in env.py).
    await asyncio.get_running_loop().run_in_executor(None, _ALEMBIC.acquire)
    engine = create_engine(target, pool_size=1) if isinstance(target, str) else target
    try:
        with translated(what):
            async with engine.begin() as conn:
                return await conn.run_sync(fn)
    finally:
        _ALEMBIC.release()
        if isinstance(target, str):
            await engine.dispose()


async def upgrade_async(target: str | AsyncEngine, revision: str = "head") -> None:
    await _with_connection(
        target, lambda c: command.upgrade(config(c), revision), "migrate the database schema"
    )


async def downgrade_async(target: str | AsyncEngine, revision: str) -> None:
    await _with_connection(
        target, lambda c: command.downgrade(config(c), revision), "downgrade the database schema"
    )


async def current_async(target: str | AsyncEngine) -> str | None:
    """The database's revision (None: no schema yet)."""
    return await _with_connection(
        target,
        lambda c: MigrationContext.configure(c).get_current_revision(),
        "read the schema revision",
    )


def _blocking(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (idempotent; safe to race)."""
    _blocking(upgrade_async(url, revision))


def downgrade(url: str, revision: str) -> None:
    """Migrate down to ``revision`` (``"base"`` drops everything; ``"-1"`` one step)."""
    _blocking(downgrade_async(url, revision))


def current(url: str) -> str | None:
    return _blocking(current_async(url))


def new_revision(url: str, message: str) -> None:
    """Autogenerate ``versions/NNNN_<slug>.py`` from the diff between ``tables.py`` and the
    (fully upgraded) database at ``url``. Review the file before committing it."""
    number = f"{len(revisions()) + 1:04d}"

    def run(c: Connection) -> None:
        command.revision(config(c), message=message, autogenerate=True, rev_id=number)

    _blocking(_with_connection(url, run, "autogenerate a migration"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters.postgres.migrate")
    parser.add_argument("action", choices=["upgrade", "downgrade", "current", "revision"])
    parser.add_argument("revision", nargs="?", default=None)
    parser.add_argument("--url", default=None)
    parser.add_argument("-m", "--message", default=None)
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("no database URL: pass --url postgresql://USER:PW@HOST:PORT/DB")
    if args.action == "upgrade":
        upgrade(args.url, args.revision or "head")
    elif args.action == "downgrade":
        if not args.revision:
            parser.error("downgrade needs a REVISION (e.g. -1 or base)")
        downgrade(args.url, args.revision)
    elif args.action == "current":
        print(current(args.url) or "(empty database)")
    else:
        if not args.message:
            parser.error("revision needs -m MESSAGE")
        new_revision(args.url, args.message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
