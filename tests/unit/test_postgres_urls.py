"""The PostgreSQL URL forms (adapters/postgres/connect.py): any PostgreSQL scheme, the rest of
the URL kept as given, and no password in what an error or a message shows."""

from __future__ import annotations

import pytest

from adapters.postgres.connect import async_url, check_reachable, plain_url, shown
from domain.errors import InvalidInput

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "url",
    [
        "postgres://u:p%40ss@h:5432/d?sslmode=require",
        "postgresql://u:p%40ss@h:5432/d?sslmode=require",
        "POSTGRESQL+psycopg://u:p%40ss@h:5432/d?sslmode=require",
        "postgresql+asyncpg://u:p%40ss@h:5432/d?sslmode=require",
    ],
)
def test_every_postgresql_scheme_keeps_the_rest(url: str) -> None:
    assert plain_url(url) == "postgresql://u:p%40ss@h:5432/d?sslmode=require"
    assert async_url(url) == "postgresql+asyncpg://u:p%40ss@h:5432/d?sslmode=require"


@pytest.mark.parametrize(
    ("url", "seen"),
    [
        ("postgresql://u:p%40ss@h:5432/d", "postgresql://u:***@h:5432/d"),
        ("postgres://u:@h/d", "postgresql://u:***@h/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
        ("postgresql:///d?host=/run/postgresql", "postgresql:///d?host=/run/postgresql"),
        ("postgresql://[::1]:5432/d", "postgresql://[::1]:5432/d"),
    ],
)
def test_shown_hides_only_the_password(url: str, seen: str) -> None:
    assert shown(url) == seen


@pytest.mark.parametrize(
    "url", ["mysql://u:secret@h/d", "u:secret@h/d", "", "postgresqlx://u:secret@h/d"]
)
def test_other_urls_are_refused_without_echoing_them(url: str) -> None:
    for form in (plain_url, async_url, shown):
        with pytest.raises(ValueError) as err:
            form(url)
        assert "secret" not in str(err.value) and "postgresql://USER" in str(err.value)


async def test_the_start_check_names_a_bad_url_not_its_password() -> None:
    with pytest.raises(InvalidInput) as err:
        await check_reachable("mysql://u:secret@h/d")
    assert "secret" not in str(err.value) and "TUNEPLANE_DATABASE_URL" in err.value.fix
