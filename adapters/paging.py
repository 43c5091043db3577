"""Keyset-pagination cursors and page limits, shared by the in-memory and PostgreSQL adapters.

A cursor is the (created_at, id) of the last row of a page, as URL-safe base64 of JSON. Both
adapters order jobs by (created_at, id), so a cursor from one page picks up exactly after it.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from domain.errors import InvalidInput

MAX_PAGE = 1000
MAX_ID = 200  # no row id is longer


def encode_cursor(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raises InvalidInput (field ``cursor``) for anything that is not one of our cursors: not
    base64 of a JSON list of exactly an aware ISO time and an id, or an id no row can have (a
    NUL or another control character, a lone surrogate, more than :data:`MAX_ID` characters),
    which the database would refuse (a 500) rather than match."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
        if not (isinstance(value, list) and len(value) == 2):
            raise ValueError(cursor)
        created, row_id = value
        if not (isinstance(created, str) and isinstance(row_id, str)) or not _plain(row_id):
            raise ValueError(cursor)
        at = datetime.fromisoformat(created)
        if at.tzinfo is None:
            raise ValueError(cursor)
        at.astimezone(UTC)  # OverflowError past year 1 or 9999 in UTC, which no row has
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(
            "the page cursor is not a next_cursor this server gave out",
            fix="start the listing again without a cursor, then pass each page's next_cursor "
            "unchanged",
            field="cursor",
        ) from exc
    return at, row_id


def _plain(text: str) -> bool:
    """Text of at most MAX_ID characters, UTF-8 encodable (no lone surrogate), without control
    characters (NUL included)."""
    if not 0 < len(text) <= MAX_ID or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(
            f"limit {limit} is out of range", fix=f"use 1 to {MAX_PAGE}", field="limit"
        )
