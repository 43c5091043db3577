"""A revocation, or a change of a user, reaches the other API processes' token caches through
PostgreSQL (issue 24): two apps, each with its own context and its own LISTEN connection as two
`tp serve` processes have, their caches kept for an hour so that only the TOKENS_REVOKED
notification can make the second see it; the first sees it on the very next request."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.postgres.signals import PostgresSignals
from adapters.postgres.uow import PostgresUnitOfWork
from application import tokens
from application.auth import authenticate, bootstrap_admin
from domain.auth import Role, User
from entrypoints.api.app import create_app
from tests.support.asgi import asgi_transport
from tests.support.context import memory_context

pytestmark = pytest.mark.integration


@dataclass
class TwoApis:
    one: httpx.AsyncClient
    two: httpx.AsyncClient
    admin: dict[str, str]  # the admin's headers
    hers: dict[str, str]  # alice's (a member of team default)
    her_token_id: str
    second: PostgresSignals  # the second process's listening connection

    async def until(
        self, client: httpx.AsyncClient, done: Callable[[httpx.Response], bool]
    ) -> None:
        """Ask ``client`` for alice's whoami until ``done`` (the notification arrived), at
        most 10 s (the caches live an hour: only the notification can end the wait)."""
        for _ in range(200):
            if done(await client.get("/v1/whoami", headers=self.hers)):
                return
            await asyncio.sleep(0.05)


@asynccontextmanager
async def two_apis(tmp_path: Path, pg_engine: AsyncEngine, pg_url: str) -> AsyncIterator[TwoApis]:
    signals = [PostgresSignals(pg_url), PostgresSignals(pg_url)]
    base = dataclasses.replace(memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine))
    ctxs = [dataclasses.replace(base, signals=s) for s in signals]
    admin_secret = await bootstrap_admin(base)
    assert admin_secret is not None
    async with base.units.fleet() as uow:
        await uow.policy.put_user(User("alice", Role.MEMBER, ("default",)))
        await uow.commit()
    alice = await tokens.create(base, await authenticate(base, admin_secret), "alice")
    apps = [create_app(c, supervise=False, token_cache_seconds=3600) for c in ctxs]
    for s in signals:
        await s.start()
    try:
        # httpx's ASGI transport runs each app on this test's loop (the pools are bound to it)
        t1, t2 = (asgi_transport(a) for a in apps)
        async with (
            httpx.AsyncClient(transport=t1, base_url="http://one") as one,
            httpx.AsyncClient(transport=t2, base_url="http://two") as two,
        ):
            yield TwoApis(
                one,
                two,
                {"Authorization": f"Bearer {admin_secret}"},
                {"Authorization": f"Bearer {alice.secret}"},
                alice.token.id,
                signals[1],
            )
    finally:
        for s in signals:
            await s.close()


async def test_a_revocation_clears_every_api_process_cache(
    tmp_path: Path, pg_engine: AsyncEngine, pg_url: str
) -> None:
    async with two_apis(tmp_path, pg_engine, pg_url) as apis:
        one, two = apis.one, apis.two
        assert (await two.get("/v1/whoami", headers=apis.hers)).status_code == 200  # cached
        r = await one.post(f"/v1/tokens/{apis.her_token_id}/revoke", headers=apis.admin)
        assert r.status_code == 200
        assert (await one.get("/v1/whoami", headers=apis.hers)).status_code == 401
        # the other process: only the notification can clear its hour-long cache
        await apis.until(two, lambda r: r.status_code == 401)
        assert (await two.get("/v1/whoami", headers=apis.hers)).status_code == 401
        assert apis.second.received >= 1


async def test_a_user_change_clears_every_api_process_cache(
    tmp_path: Path, pg_engine: AsyncEngine, pg_url: str
) -> None:
    async with two_apis(tmp_path, pg_engine, pg_url) as apis:
        one, two = apis.one, apis.two
        seen = (await two.get("/v1/whoami", headers=apis.hers)).json()  # cached for an hour
        assert (seen["role"], seen["teams"]) == ("member", ["default"])
        # a new role: the other process answers with it, not with its cached principal
        r = await one.patch("/v1/users/alice", json={"role": "viewer"}, headers=apis.admin)
        assert r.status_code == 200
        assert (await one.get("/v1/whoami", headers=apis.hers)).json()["role"] == "viewer"
        await apis.until(two, lambda r: r.json().get("role") == "viewer")
        assert (await two.get("/v1/whoami", headers=apis.hers)).json()["role"] == "viewer"
        # disabled through API 1: refused by API 1 at once, by API 2 once the hint arrives
        r = await one.patch("/v1/users/alice", json={"disabled": True}, headers=apis.admin)
        assert r.status_code == 200
        refused = await one.get("/v1/whoami", headers=apis.hers)
        assert refused.status_code == 401 and "alice is disabled" in refused.text
        await apis.until(two, lambda r: r.status_code == 401)
        refused = await two.get("/v1/whoami", headers=apis.hers)
        assert refused.status_code == 401 and "alice is disabled" in refused.text
        assert apis.second.received >= 2
