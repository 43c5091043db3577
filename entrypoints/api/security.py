"""Bearer-token authentication with a short in-process cache.

Looking a token up costs a database round trip per request; a cache of a few seconds keeps that
off the hot path. A revoked token therefore stays usable for at most ``ttl`` seconds.
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Request
from litestar.openapi.spec import Components, SecurityScheme

from application.auth import authenticate
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
        self._entries: dict[str, tuple[float, Principal]] = {}

    async def principal(self, ctx: Context, secret: str | None) -> Principal:
        now = time.monotonic()
        if secret:
            hit = self._entries.get(secret)
            if hit and hit[0] > now:
                return hit[1]
        principal = await authenticate(ctx, secret)
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[secret or ""] = (now + self.ttl, principal)
        return principal


def bearer(request: Request[Any, Any, Any]) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def provide_principal(request: Request[Any, Any, Any]) -> Principal:
    state = request.app.state
    cache: TokenCache = state.token_cache
    return await cache.principal(state.ctx, bearer(request))
