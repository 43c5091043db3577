"""Bearer-token authentication with a short in-process cache.

Looking a token up costs a database round trip per request; a cache of a few seconds keeps that
off the hot path. An entry never outlives its token's expiry; a revocation, or a change of a
user (disabled, role, teams), clears the cache of the process that made it at once and, through
the TOKENS_REVOKED signal, of every other API process (if that hint is lost, a revoked token or
a disabled user's stays usable there for at most ``ttl`` seconds).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.openapi.spec import Components, SecurityScheme

from application.auth import authenticate_token
from application.context import Context
from domain.auth import Principal

SECURITY_COMPONENTS = Components(
    security_schemes={
        "BearerToken": SecurityScheme(type="http", scheme="bearer", description="API token")
    }
)
SECURITY: list[dict[str, list[str]]] = [{"BearerToken": []}]


class TokenCache:
    def __init__(self, ttl: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        # secret → (monotonic deadline, principal, the token's expiry by the context's clock)
        self._entries: dict[str, tuple[float, Principal, datetime | None]] = {}

    async def principal(self, ctx: Context, secret: str | None) -> Principal:
        now = time.monotonic()
        if secret:
            hit = self._entries.get(secret)
            if hit and hit[0] > now and (hit[2] is None or ctx.clock.now() < hit[2]):
                return hit[1]
        principal, token = await authenticate_token(ctx, secret)
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[secret or ""] = (now + self.ttl, principal, token.expires_at)
        return principal

    def clear(self) -> None:
        """Forget every lookup: a token was revoked or a user changed (here, or in another
        process)."""
        self._entries.clear()


def bearer(request: Request[Any, Any, Any]) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


Caller = NamedDependency[Principal]
"""A handler's ``principal``: the caller, from ``provide_principal`` (app.py's dependency)."""


async def provide_principal(request: Request[Any, Any, Any]) -> Principal:
    state = request.app.state
    cache: TokenCache = state.token_cache
    return await cache.principal(state.ctx, bearer(request))
