"""Migrations: the stairway (every revision up, down, up again), and schema == tables.py."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import asyncpg
import pytest
import setuptools
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, Text, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres import migrate
from adapters.postgres.connect import plain_url
from adapters.postgres.tables import metadata
from domain.auth import Role
from domain.fleet import Connectivity, SchedState
from domain.lifecycle import AttemptState, JobState, MemberState

pytestmark = pytest.mark.integration

APP_TABLES = {t.name for t in metadata.sorted_tables}


async def _tables(url: str) -> set[str]:
    conn = await asyncpg.connect(plain_url(url))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return {r["tablename"] for r in rows}


def _diff(engine_conn: Connection, target: MetaData) -> list[Any]:
    ctx = MigrationContext.configure(
        engine_conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return list(compare_metadata(ctx, target))


async def _schema_diff(engine: AsyncEngine, target: MetaData) -> list[Any]:
    async with engine.connect() as conn:
        return await conn.run_sync(_diff, target)


async def test_stairway_up_down_up(empty_db: str) -> None:
    revisions = migrate.revisions()
    assert revisions[0] == "0001" and revisions[-1] == migrate.head()
    script = ScriptDirectory.from_config(migrate.config())
    for revision in revisions:
        below = script.get_revision(revision).down_revision or "base"
        assert isinstance(below, str), "the history must stay linear"
        await migrate.upgrade_async(empty_db, revision)
        assert await migrate.current_async(empty_db) == revision
        await migrate.downgrade_async(empty_db, below)
        assert await migrate.current_async(empty_db) == (None if below == "base" else below)
        await migrate.upgrade_async(empty_db, revision)
    assert await _tables(empty_db) == APP_TABLES | {"alembic_version"}
    await migrate.downgrade_async(empty_db, "base")
    assert await _tables(empty_db) == {"alembic_version"}
    assert await migrate.current_async(empty_db) is None
    await migrate.upgrade_async(empty_db, "head")
    assert await migrate.current_async(empty_db) == migrate.head()


async def test_blocking_api_works_inside_a_running_loop(empty_db: str) -> None:
    migrate.upgrade(empty_db)  # runs on a helper thread because a loop is running here
    migrate.upgrade(empty_db)  # idempotent
    assert migrate.current(empty_db) == migrate.head()


async def test_concurrent_upgrades_in_one_process_serialise(empty_db: str) -> None:
    await asyncio.gather(*(migrate.upgrade_async(empty_db) for _ in range(3)))
    assert await migrate.current_async(empty_db) == migrate.head()


async def test_processes_upgrading_together_serialise(empty_db: str) -> None:
    argv = [sys.executable, "-m", "adapters.postgres.migrate", "upgrade", "--url", empty_db]
    procs = [
        await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
        for _ in range(2)
    ]
    outcomes = [(await p.wait(), (await p.stderr.read()).decode()) for p in procs if p.stderr]
    assert [rc for rc, _ in outcomes] == [0, 0], outcomes
    assert await migrate.current_async(empty_db) == migrate.head()


async def test_upgraded_schema_matches_tables_py(pg_engine: AsyncEngine) -> None:
    assert await _schema_diff(pg_engine, metadata) == []


async def test_the_schema_comparison_notices_a_difference(pg_engine: AsyncEngine) -> None:
    changed = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["jobs"].append_column(Column("priority", Text, nullable=True))
    diff = await _schema_diff(pg_engine, changed)
    assert [d[0] for d in diff] == ["add_column"]


@pytest.mark.parametrize(
    ("table", "column", "values"),
    [
        ("jobs", "state", JobState),
        ("attempts", "state", AttemptState),
        ("members", "state", MemberState),
        ("users", "role", Role),
        ("nodes", "sched", SchedState),
        ("nodes", "connectivity", Connectivity),
    ],
)
async def test_check_constraints_list_exactly_the_enum(
    pg_engine: AsyncEngine, table: str, column: str, values: Any
) -> None:
    async with pg_engine.connect() as conn:
        definition = (
            await conn.execute(
                text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
                {"n": f"ck_{table}_{column}"},
            )
        ).scalar_one()
    allowed = set(
        definition.split("ARRAY[", 1)[1].split("]", 1)[0].replace("::text", "").split(", ")
    )
    assert allowed == {f"'{v.value}'" for v in values}


def test_migration_scripts_ship_with_the_package() -> None:
    packages = setuptools.find_packages(include=["adapters*"])
    assert "adapters.postgres.migrations" in packages
    assert "adapters.postgres.migrations.versions" in packages
    assert (migrate.SCRIPTS / "script.py.mako").is_file()
    assert (migrate.SCRIPTS / "env.py").is_file()
