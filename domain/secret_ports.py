"""The port that keeps secrets the control plane must read back (a webhook's signing secret:
it signs with it, so it cannot be hashed like a token) sealed at rest, under keys that are not
in the database (docs/notifications.md#the-secret-at-rest)."""

from __future__ import annotations

from typing import Protocol

from domain.errors import Unavailable


class SecretUnreadable(Unavailable):
    """A sealed secret no key opens: a wrong or missing key, or a corrupted value. Its message
    never holds the secret nor the sealed value."""


class SecretBox(Protocol):
    def seal(self, clear: str) -> str:
        """``clear`` sealed (authenticated encryption) under the newest key."""
        ...

    def open(self, sealed: str) -> str:
        """The clear secret, opened with any key (newest first). SecretUnreadable if none
        opens it or it was altered."""
        ...

    def reseal(self, sealed: str) -> str:
        """The same secret sealed again under the newest key. SecretUnreadable as ``open``."""
        ...
