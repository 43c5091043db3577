"""Tokens on a real server (`tp serve` on PostgreSQL; issue 24): a member's own tokens, listed
and revoked, the revocation refused on the very next request; a member who can neither see nor
revoke another's; a token that expired (stored with a past expiry through the repository, the
server's clock being real) refused exactly as an unknown one; the last use recorded."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.uow import PostgresUnitOfWork
from domain.auth import ApiToken
from tests.fixtures.server import Servers
from tests.support.problems import said

pytestmark = pytest.mark.e2e


async def test_tokens_on_a_live_server(api_server: Servers, pg_engine: AsyncEngine) -> None:
    async with httpx.AsyncClient(base_url=api_server.url, timeout=30) as http:
        admin = api_server.headers
        r = await http.post(
            "/v1/users", json={"name": "alice", "teams": ["default"]}, headers=admin
        )
        assert r.status_code == 201, r.text
        r = await http.post(
            "/v1/users/alice/tokens", json={"label": "laptop", "expires_in_seconds": 86400},
            headers=admin,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        made = r.json()
        alice = {"Authorization": f"Bearer {made['token']}"}
        [mine] = (await http.get("/v1/tokens", headers=alice)).json()
        assert (mine["id"], mine["label"], mine["state"]) == (made["id"], "laptop", "active")
        assert mine["last_used_at"] is not None  # this request's use, to the minute
        # another's tokens: neither listed nor revoked, and no word on whether they exist
        assert (await http.get("/v1/tokens?user=admin", headers=alice)).status_code == 403
        theirs = await http.post("/v1/tokens/tok-first-admin/revoke", headers=alice)
        nothing = await http.post("/v1/tokens/tok-none/revoke", headers=alice)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json()["title"] == nothing.json()["title"]
        everyone = (await http.get("/v1/tokens", headers=admin)).json()
        assert {t["id"] for t in everyone} >= {"tok-first-admin", made["id"]}
        assert not any("hash" in key or key == "token" for t in everyone for key in t)

        # expired: a token stored with a past expiry, refused exactly as an unknown one
        secret = "tp_expired-on-purpose"
        past = datetime.now(UTC) - timedelta(minutes=5)
        async with PostgresUnitOfWork(pg_engine) as uow:
            await uow.tokens.add(
                ApiToken(
                    "tok-expired", "alice", hashlib.sha256(secret.encode()).hexdigest(),
                    past - timedelta(days=1), label="old", expires_at=past,
                )
            )  # fmt: skip
            await uow.commit()
        expired = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
        unknown = await http.get("/v1/whoami", headers={"Authorization": "Bearer tp_unknown"})
        assert expired.status_code == unknown.status_code == 401
        assert said(expired) == said(unknown)
        listed = {
            t["id"]: t for t in (await http.get("/v1/tokens?user=alice", headers=admin)).json()
        }
        assert listed["tok-expired"]["state"] == "expired"

        # revoked by an admin: the very next request with it is refused
        assert (await http.get("/v1/whoami", headers=alice)).status_code == 200  # cached now
        r = await http.post(f"/v1/tokens/{made['id']}/revoke", headers=admin)
        assert r.status_code == 200 and r.json()["token"]["state"] == "revoked"
        refused = await http.get("/v1/whoami", headers=alice)
        assert refused.status_code == 401 and said(refused) == said(unknown)
