"""Row helpers shared by the repositories: insert-if-new and compare-and-set."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.errors import translated
from domain.errors import Conflict, NotFound


async def insert_new(
    conn: AsyncConnection, table: Table, values: dict[str, Any], what: str
) -> None:
    """INSERT … ON CONFLICT DO NOTHING: a duplicate raises Conflict without aborting the
    transaction (as a unique violation would), so the unit of work stays usable. A missing
    parent row (foreign key) raises NotFound and does abort it."""
    pk = next(iter(table.primary_key.columns))
    with translated(f"add {what}"):
        done = (
            await conn.execute(
                pg_insert(table).values(values).on_conflict_do_nothing().returning(pk)
            )
        ).first()
    if done is None:
        raise Conflict(f"{what} already exists (same id or same unique key)", fix="use a new id")


async def compare_and_set(
    conn: AsyncConnection, table: Table, what: str, values: dict[str, Any], expected: str
) -> None:
    """UPDATE … WHERE id = … AND state = expected; Conflict or NotFound when nothing matched."""
    row_id = values.pop("id")
    with translated(f"update {what} {row_id}"):
        done = (
            await conn.execute(
                update(table)
                .where(table.c.id == row_id, table.c.state == expected)
                .values(values)
                .returning(table.c.id)
            )
        ).first()
        if done is not None:
            return
        current = (await conn.execute(select(table.c.state).where(table.c.id == row_id))).scalar()
    if current is None:
        raise NotFound(f"{what} {row_id} does not exist", fix=f"check the {what} id")
    raise Conflict(
        f"{what} {row_id} is {current}, not {expected}: another writer changed it",
        fix=f"re-read the {what} and decide again",
    )
