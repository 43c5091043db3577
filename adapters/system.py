"""The real clock, id generator and secret source."""

from __future__ import annotations

import os
import secrets
import time
from datetime import UTC, datetime


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class RandomIds:
    """``<kind>-<time-ordered hex>``: 48 bits of milliseconds then 64 random bits.

    Ids sort roughly by creation time, which keeps B-tree inserts local.
    """

    def new(self, kind: str) -> str:
        ms = time.time_ns() // 1_000_000
        return f"{kind}-{ms:012x}{os.urandom(8).hex()}"


def new_secret() -> str:
    return secrets.token_urlsafe(32)
