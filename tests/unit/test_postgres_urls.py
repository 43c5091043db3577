"""The PostgreSQL URL forms (adapters/postgres/connect.py): any PostgreSQL scheme, the rest of
the URL kept as given, and no password in what an error or a message shows."""

from __future__ import annotations

import pytest

from adapters.postgres.connect import async_url, check_reachable, plain_url, shown
from domain.errors import InvalidInput, Unavailable

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
        ("postgresql://u:p#s/s?x@h/d", "postgresql://u:***@h/d"),
        ("postgresql:///d?user=a@b", "postgresql:///d?user=a@b"),
    ],
)
def test_shown_hides_only_the_password(url: str, seen: str) -> None:
    assert shown(url) == seen


@pytest.mark.parametrize(
    ("url", "plain"),
    [
        ("postgresql://u:p#ss@h:5432/d", "postgresql://u:p%23ss@h:5432/d"),
        ("postgresql://u:pa/ss@h/d", "postgresql://u:pa%2Fss@h/d"),
        ("postgresql://u:p?ss@h/d?sslmode=disable", "postgresql://u:p%3Fss@h/d?sslmode=disable"),
        ("postgresql://u:p@ss@h/d", "postgresql://u:p%40ss@h/d"),
        ("postgresql://user@server:pw@h/d", "postgresql://user%40server:pw@h/d"),
        ("postgresql://u:p%zz@h/d", "postgresql://u:p%25zz@h/d"),
    ],
)
def test_a_password_with_url_characters_is_encoded_for_the_drivers(url: str, plain: str) -> None:
    assert plain_url(url) == plain
    user = plain.removeprefix("postgresql://").partition(":")[0]
    assert shown(url) == f"postgresql://{user}:***@" + plain.rpartition("@")[2]


async def test_a_password_with_url_characters_reaches_the_server_check_unbroken() -> None:
    with pytest.raises(Unavailable) as err:  # nothing listens on port 1
        await check_reachable("postgresql://u:se#cr/et@127.0.0.1:1/d")
    assert "secret" not in str(err.value).replace("/", "").replace("#", "")
    assert "postgresql://u:***@127.0.0.1:1/d" in str(err.value)


async def test_a_port_the_driver_cannot_use_is_refused_without_the_password() -> None:
    with pytest.raises(InvalidInput) as err:
        await check_reachable("postgresql://u:secret@127.0.0.1:99999/d")
    assert "secret" not in str(err.value) and "TUNEPLANE_DATABASE_URL" in err.value.fix


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
