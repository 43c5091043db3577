"""`--expires` of `tp admin token create` (issue 24): durations in m, h, d, w, y and dates;
what cannot be an expiry is refused naming the flag, before any request. And what `tp serve`'s
bootstrap prints: the token itself only on a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.errors import InvalidInput
from entrypoints.cli.tokens import parse_expires
from entrypoints.server import first_start_text

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", {"expires_in_seconds": 30 * 86400}),
        ("12h", {"expires_in_seconds": 12 * 3600}),
        ("90m", {"expires_in_seconds": 90 * 60}),
        ("2w", {"expires_in_seconds": 14 * 86400}),
        ("5y", {"expires_in_seconds": 5 * 365 * 86400}),
        ("2027-01-31", {"expires_at": "2027-01-31T00:00:00+00:00"}),
        ("2027-01-31T12:00:00Z", {"expires_at": "2027-01-31T12:00:00+00:00"}),
        ("2027-01-31T12:00:00+02:00", {"expires_at": "2027-01-31T12:00:00+02:00"}),
    ],
)
def test_expiries(text: str, expected: dict[str, object]) -> None:
    assert parse_expires(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0d", "at once"),
        ("0", "neither a duration nor a date"),
        ("-5d", "neither a duration nor a date"),
        ("10000y", "past the limit of 5 years"),
        ("6y", "past the limit of 5 years"),
        ("soon", "neither a duration nor a date"),
        ("30d\x00", "neither a duration nor a date"),
        ("", "neither a duration nor a date"),
        ("9" * 40 + "d", "neither a duration nor a date"),
        ("3\uff10d", "neither a duration nor a date"),  # a full-width digit
    ],
)
def test_bad_expiries(text: str, says: str) -> None:
    with pytest.raises(InvalidInput, match=says) as err:
        parse_expires(text)
    assert err.value.field == "--expires" and "30d" in (err.value.fix or "")


def test_serve_shows_the_first_token_only_on_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "admin-token"
    logged = first_start_text(path, "tp_secret", "http://h:1", terminal=False)
    assert str(path) in logged and "tp_secret" not in logged
    shown = first_start_text(path, "tp_secret", "http://h:1", terminal=True)
    assert str(path) in shown and "the admin token (shown once): tp_secret" in shown
