"""One Ed25519 signing key (kid ``k1``) for tests that mint collector tokens without a
database (``CollectorTokens(OneKey())``)."""

from __future__ import annotations

from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class OneKey:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()

    async def current(self, now: datetime) -> tuple[str, Ed25519PrivateKey]:
        return "k1", self.key

    async def public(self, kid: str) -> Ed25519PublicKey | None:
        return self.key.public_key() if kid == "k1" else None
