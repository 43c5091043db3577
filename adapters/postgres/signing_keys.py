"""Signing keys of collector tokens, kept in PostgreSQL (``signing_keys``).

The control plane signs with the newest key of a purpose and makes a new one when that key is
older than ``rotate_after``; gateways verify with the public key named by a token's ``kid``.
A key is deleted once no token it signed can still be valid (``rotate_after`` plus the longest
token lifetime). Whoever can read this table can mint collector tokens, as whoever can write
the database can do anything: keep its credentials as narrow as the database's.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class PostgresSigningKeys:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        purpose: str = "telemetry",
        rotate_after: timedelta = timedelta(days=7),
        keep_for: timedelta = timedelta(days=30),
    ) -> None:
        self.pool = pool
        self.purpose = purpose
        self.rotate_after = rotate_after
        self.keep_for = keep_for
        self._public: dict[str, Ed25519PublicKey] = {}

    async def current(self, now: datetime) -> tuple[str, Ed25519PrivateKey]:
        """The newest key, made now if there is none or it is older than ``rotate_after``."""
        row = await self.pool.fetchrow(
            "SELECT kid, private_pem, created_at FROM signing_keys WHERE purpose = $1"
            " ORDER BY created_at DESC LIMIT 1",
            self.purpose,
        )
        if row is not None and now - row["created_at"] < self.rotate_after:
            key = serialization.load_pem_private_key(row["private_pem"].encode(), None)
            assert isinstance(key, Ed25519PrivateKey)
            return row["kid"], key
        return await self.rotate(now)

    async def rotate(self, now: datetime) -> tuple[str, Ed25519PrivateKey]:
        """Make a new key (it signs from now on) and delete keys past ``keep_for``."""
        key = Ed25519PrivateKey.generate()
        kid = f"{self.purpose}-{now:%Y%m%d%H%M%S}-{secrets.token_hex(4)}"
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        public = (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO signing_keys (kid, purpose, private_pem, public_pem, created_at)"
                " VALUES ($1, $2, $3, $4, $5)",
                kid,
                self.purpose,
                private,
                public,
                now,
            )
            await conn.execute(
                "DELETE FROM signing_keys WHERE purpose = $1 AND created_at < $2",
                self.purpose,
                now - self.keep_for,
            )
        return kid, key

    async def public(self, kid: str) -> Ed25519PublicKey | None:
        if kid in self._public:
            return self._public[kid]
        pem = await self.pool.fetchval(
            "SELECT public_pem FROM signing_keys WHERE kid = $1 AND purpose = $2",
            kid,
            self.purpose,
        )
        if pem is None:
            return None
        key = serialization.load_pem_public_key(pem.encode())
        assert isinstance(key, Ed25519PublicKey)
        self._public[kid] = key
        return key
