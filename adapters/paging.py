"""Keyset-pagination cursors and page limits, shared by the in-memory and PostgreSQL adapters.

A cursor is the (created_at, id) of the last row of a page, as URL-safe base64 of JSON. Both
adapters order jobs by (created_at, id), so a cursor from one page picks up exactly after it.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime

from domain.errors import InvalidInput

MAX_PAGE = 1000


def encode_cursor(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), row_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raises InvalidInput (field ``cursor``) for anything that is not one of our cursors."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, row_id = json.loads(raw)
        at = datetime.fromisoformat(created)
        if at.tzinfo is None or not isinstance(row_id, str):
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(
            "the page cursor is not valid",
            fix="pass the next_cursor of a previous page unchanged, or omit it for the first page",
            field="cursor",
        ) from exc
    return at, row_id


def check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(
            f"limit {limit} is out of range", fix=f"use 1 to {MAX_PAGE}", field="limit"
        )
