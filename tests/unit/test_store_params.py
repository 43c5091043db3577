"""The PostgreSQL store's parameters, before any server sees them: GPU runs (one run for
consecutive GPUs, a GPU listed twice refused) and the array literals' exact text
(adapters/postgres/reservations.py, arrays.py; their round trip through PostgreSQL is
tests/integration/test_array_literals.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.postgres.arrays import int_array, text_array, time_array
from adapters.postgres.reservations import gpu_runs
from domain.errors import Conflict


@pytest.mark.parametrize(
    ("gpus", "runs"),
    [
        ((), []),
        ((3,), [(3, 4)]),
        ((0, 1, 2, 3, 4, 5, 6, 7), [(0, 8)]),
        ((7, 5, 6), [(5, 8)]),
        ((0, 1, 2, 5), [(0, 3), (5, 6)]),
        ((6, 0, 2), [(0, 1), (2, 3), (6, 7)]),
    ],
)
def test_gpus_become_runs_of_consecutive_indexes(gpus: tuple[int, ...], runs: list[object]) -> None:
    assert gpu_runs(gpus) == runs


@pytest.mark.parametrize("gpus", [(1, 1), (0, 0, 2), (0, 1, 1, 2), (4, 2, 4)])
def test_a_gpu_listed_twice_is_refused(gpus: tuple[int, ...]) -> None:
    with pytest.raises(Conflict, match="listed twice"):
        gpu_runs(gpus)


def test_literals_quote_every_text_and_escape_only_backslash_and_quote() -> None:
    assert text_array([]) == "{}"
    assert text_array(["a", "b c"]) == '{"a","b c"}'
    assert text_array(['x"y', "a\\b", None, "NULL"]) == '{"x\\"y","a\\\\b",NULL,"NULL"}'
    assert int_array([1, None, -2]) == "{1,NULL,-2}"
    at = datetime(2026, 12, 6, 11, 0, tzinfo=UTC)
    assert time_array([at, None, at]) == (
        '{"2026-12-06T11:00:00+00:00",NULL,"2026-12-06T11:00:00+00:00"}'
    )
