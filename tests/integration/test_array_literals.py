"""The array literals the scheduler's store binds (adapters/postgres/arrays.py) read back as the
same values through PostgreSQL's own array input, whatever the text holds: quotes, backslashes,
commas, braces, spaces, newlines, the word NULL, empty strings, non-ASCII; NULLs; negative and
large integers; timestamps with any offset. A naive timestamp is refused before it is sent."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from adapters.postgres.arrays import int_array, literal_params, text_array, time_array
from adapters.postgres.connect import plain_url

pytestmark = pytest.mark.integration

HOSTILE = [
    "job-000001", "", " ", "a,b", "{x}", 'say "hi"', "back\\slash", "\\", '"', "NULL", "null",
    "line\nbreak", "tab\there", "ünï©ødé ☃", "  padded  ", "}{,\"\\", "'single'",
]  # fmt: skip


async def _back(conn: asyncpg.Connection, literal: str, sql_type: str) -> list[object]:
    return list(await conn.fetchval(f"SELECT CAST(CAST($1 AS text) AS {sql_type}[])", literal))


async def test_hostile_text_ints_and_times_read_back_unchanged(empty_db: str) -> None:
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        assert await _back(conn, text_array(HOSTILE), "text") == HOSTILE
        with_nulls = ["a", None, "NULL", None, ""]
        assert await _back(conn, text_array(with_nulls), "text") == with_nulls
        assert await _back(conn, text_array([]), "text") == []
        assert await _back(conn, text_array(["only"]), "text") == ["only"]
        ints = [0, -1, 2_147_483_647, -2_147_483_648, None, 7]
        assert await _back(conn, int_array(ints), "int") == ints
        assert await _back(conn, int_array([]), "int") == []
        times = [
            datetime(2026, 12, 6, 11, 0, tzinfo=UTC),
            datetime(2026, 12, 6, 11, 0, 0, 123456, tzinfo=UTC),
            datetime(2026, 12, 6, 12, 0, tzinfo=timezone(timedelta(hours=1))),  # = the first
            None,
            datetime(1999, 1, 1, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        ]
        assert await _back(conn, time_array(times), "timestamptz") == times
    finally:
        await conn.close()


async def test_random_text_reads_back_unchanged(empty_db: str) -> None:
    rng = random.Random(26)
    alphabet = "ab ,{}\"\\\nNUL\té☃'" + "".join(chr(c) for c in range(1, 32))
    conn = await asyncpg.connect(plain_url(empty_db))
    try:
        for _ in range(200):
            values = [
                None if rng.random() < 0.1 else "".join(rng.choices(alphabet, k=rng.randint(0, 8)))
                for _ in range(rng.randint(0, 12))
            ]
            assert await _back(conn, text_array(values), "text") == values, values
    finally:
        await conn.close()


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        time_array([datetime(2026, 12, 6)])


def test_only_array_casts_take_a_literal() -> None:
    sql = "SELECT CAST(:a AS text[]), CAST(:b AS int[]), CAST(:c AS text), :d"
    assert literal_params(sql) == (
        "SELECT CAST(CAST(:a AS text) AS text[]), CAST(CAST(:b AS text) AS int[]), "
        "CAST(:c AS text), :d"
    )
