"""A revocation reaches the other API processes' token caches through PostgreSQL (issue 24):
two apps, each with its own context and its own LISTEN connection as two `tp serve` processes
have, their caches kept for an hour so that only the TOKENS_REVOKED notification can make the
second refuse the token; the first refuses it on the very next request."""

from __future__ import annotations

import asyncio
import dataclasses
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
from tests.support.context import memory_context

pytestmark = pytest.mark.integration


async def test_a_revocation_clears_every_api_process_cache(
    tmp_path: Path, pg_engine: AsyncEngine, pg_url: str
) -> None:
    signals = [PostgresSignals(pg_url), PostgresSignals(pg_url)]
    base = dataclasses.replace(memory_context(tmp_path), uow=lambda: PostgresUnitOfWork(pg_engine))
    ctxs = [dataclasses.replace(base, signals=s) for s in signals]
    admin_secret = await bootstrap_admin(base)
    assert admin_secret is not None
    async with base.units.fleet() as uow:
        await uow.policy.put_user(User("alice", Role.MEMBER, ("default",)))
        await uow.commit()
    alice = await tokens.create(base, await authenticate(base, admin_secret), "alice")
    admin = {"Authorization": f"Bearer {admin_secret}"}
    hers = {"Authorization": f"Bearer {alice.secret}"}
    apps = [create_app(c, supervise=False, token_cache_seconds=3600) for c in ctxs]
    for s in signals:
        await s.start()
    try:
        # httpx's ASGI transport runs each app on this test's loop (the pools are bound to it)
        t1, t2 = (httpx.ASGITransport(app=a) for a in apps)
        async with (
            httpx.AsyncClient(transport=t1, base_url="http://one") as one,
            httpx.AsyncClient(transport=t2, base_url="http://two") as two,
        ):
            assert (await two.get("/v1/whoami", headers=hers)).status_code == 200  # cached
            r = await one.post(f"/v1/tokens/{alice.token.id}/revoke", headers=admin)
            assert r.status_code == 200
            assert (await one.get("/v1/whoami", headers=hers)).status_code == 401
            # the other process: only the notification can clear its hour-long cache
            for _ in range(200):
                if (await two.get("/v1/whoami", headers=hers)).status_code == 401:
                    break
                await asyncio.sleep(0.05)
            assert (await two.get("/v1/whoami", headers=hers)).status_code == 401
            assert signals[1].received >= 1
    finally:
        for s in signals:
            await s.close()
