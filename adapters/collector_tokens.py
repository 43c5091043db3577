"""Collector tokens: JWTs (PyJWT, EdDSA over Ed25519) with audience "telemetry".

Claims: ``iss`` "tuneplane", ``aud`` "telemetry", ``sub`` the member id, ``job``, ``attempt``,
``idx`` (the member's index), ``iat``, ``exp``, ``jti``; the header's ``kid`` names the signing
key. Expiry is checked against the caller's clock (``now``) so that tests and the gateway agree
on one time source. A node control credential is an opaque secret, not a JWT: it fails here.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from domain.errors import Unauthenticated
from domain.telemetry import MemberScope
from domain.telemetry_ports import AUDIENCE, TokenClaims

ISSUER = "tuneplane"
_FIX = "the collector needs the token the control plane issued for this member's attempt"


class Keys(Protocol):
    async def current(self, now: datetime) -> tuple[str, Ed25519PrivateKey]: ...

    async def public(self, kid: str) -> Ed25519PublicKey | None: ...


class CollectorTokens:
    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    async def issue(self, scope: MemberScope, now: datetime, lifetime_seconds: int) -> str:
        kid, key = await self.keys.current(now)
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": scope.member_id,
            "job": scope.job_id,
            "attempt": scope.attempt_id,
            "idx": scope.member_index,
            "iat": int(now.timestamp()),
            "exp": int((now + timedelta(seconds=lifetime_seconds)).timestamp()),
            "jti": secrets.token_hex(8),
        }
        return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})

    async def verify(self, token: str, now: datetime) -> TokenClaims:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError:
            raise Unauthenticated("the credential is not a collector token", fix=_FIX) from None
        key = await self.keys.public(kid) if isinstance(kid, str) else None
        if key is None or not isinstance(kid, str):
            raise Unauthenticated(
                "the collector token was signed by an unknown or retired key", fix=_FIX
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=["EdDSA"],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={"verify_exp": False, "require": ["exp", "sub", "aud", "iss"]},
            )
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the collector token is not valid: {exc}", fix=_FIX) from None
        expires = datetime.fromtimestamp(int(claims["exp"]), UTC)
        if expires <= now:
            raise Unauthenticated(
                f"the collector token expired at {expires:%Y-%m-%d %H:%M:%S}Z", fix=_FIX
            )
        try:
            scope = MemberScope(
                str(claims["job"]), str(claims["attempt"]), str(claims["sub"]), int(claims["idx"])
            )
        except (KeyError, TypeError, ValueError):
            raise Unauthenticated("the collector token lacks its scope", fix=_FIX) from None
        return TokenClaims(scope, kid, expires)
