"""The token routes in-process (litestar's test client over in-memory adapters, a settable
clock): create with a label and an expiry, list, revoke; expired and revoked tokens refused
exactly as unknown ones; a member neither sees nor revokes another's tokens; the last admin
token kept. The real server over PostgreSQL: tests/e2e/test_tokens.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from application.auth import authenticate, create_token
from application.context import Context
from domain.auth import LAST_USED_PRECISION
from domain.errors import Unauthenticated
from entrypoints.api.app import create_app
from tests.support.context import FakeClock, memory_context
from tests.support.problems import said
from tests.unit.builders import T0

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    return memory_context(tmp_path, clock=clock)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        yield c


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_create_list_and_expire(client: Any, ctx: Context, clock: FakeClock) -> None:
    admin = bearer(await create_token(ctx, "admin"))
    r = await client.post(
        "/v1/users/alice/tokens", json={"label": "laptop", "expires_in_seconds": 3600},
        headers=admin,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["token"].startswith("tp_") and made["label"] == "laptop"
    assert made["expires_at"].startswith((T0 + timedelta(hours=1)).isoformat()[:19])
    alice = bearer(made["token"])
    # no body at all (the CLI before issue 24 sent JSON null): a token that never expires
    r = await client.post("/v1/users/bob/tokens", headers=admin)
    assert r.status_code == 201 and r.json()["expires_at"] is None
    listed = (await client.get("/v1/tokens", headers=admin)).json()
    assert {t["user"] for t in listed} == {"admin", "alice", "bob"}
    assert all("token" not in t and "token_hash" not in t for t in listed)
    [mine] = (await client.get("/v1/tokens", headers=alice)).json()  # a member: their own
    assert (mine["id"], mine["label"], mine["state"]) == (made["id"], "laptop", "active")
    assert mine["last_used_at"] == mine["created_at"]  # this very request used it
    assert [t["user"] for t in (await client.get("/v1/tokens?user=bob", headers=admin)).json()]
    for query in ("?user=bob", "?user=nobody"):  # forbidden alike, whether the user exists
        r = await client.get("/v1/tokens" + query, headers=alice)
        assert r.status_code == 403, query
    unknown = await client.get("/v1/whoami", headers=bearer("tp_nope"))
    clock.advance(hours=1)
    expired = await client.get("/v1/whoami", headers=alice)
    assert expired.status_code == unknown.status_code == 401
    assert said(expired) == said(unknown)  # no oracle: the same problem, word for word
    [listed_alice] = (await client.get("/v1/tokens?user=alice", headers=admin)).json()
    assert listed_alice["state"] == "expired"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"expires_in_seconds": 0}, 400, None),
        ({"expires_in_seconds": -5}, 400, None),
        ({"expires_in_seconds": 59}, 422, "expires_in_seconds"),
        ({"expires_in_seconds": 10_000 * 365 * 86400}, 422, "expires_in_seconds"),
        ({"expires_in_seconds": 2**53}, 422, "expires_in_seconds"),  # past timedelta's range
        ({"expires_in_seconds": "30d"}, 400, None),
        ({"expires_at": "9999-12-31T23:59:59Z"}, 422, "expires_at"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, 422, "expires_at"),
        ({"expires_at": "2024-06-01T00:00:00"}, 422, "expires_at"),  # no zone
        ({"expires_at": "2024-06-01T00:00:00Z", "expires_in_seconds": 60}, 422, "expires_at"),
        ({"label": "x" * 201}, 400, None),
        ({"label": "a\u0007b"}, 422, "label"),
        ({"lifetime": 5}, 400, None),
    ],
)
async def test_bad_expiries_and_labels_are_refused(
    client: Any, ctx: Context, body: dict[str, Any], status: int, field: str | None
) -> None:
    admin = bearer(await create_token(ctx, "admin"))
    before = (await client.get("/v1/tokens", headers=admin)).json()
    r = await client.post("/v1/users/alice/tokens", json=body, headers=admin)
    assert r.status_code == status, r.text
    problem = r.json()
    assert problem["detail"] and (field is None or problem["field"] == field), problem
    assert (await client.get("/v1/tokens", headers=admin)).json() == before  # nothing made


async def test_revoke(client: Any, ctx: Context) -> None:
    admin = bearer(await create_token(ctx, "admin"))
    alice = (await client.post("/v1/users/alice/tokens", headers=admin)).json()
    bob = (await client.post("/v1/users/bob/tokens", headers=admin)).json()
    assert (await client.get("/v1/whoami", headers=bearer(bob["token"]))).status_code == 200
    # a member revoking another's token is answered as for a token that does not exist
    other = await client.post(f"/v1/tokens/{bob['id']}/revoke", headers=bearer(alice["token"]))
    missing = await client.post("/v1/tokens/tok-nope/revoke", headers=bearer(alice["token"]))
    assert other.status_code == missing.status_code == 404
    assert other.json()["detail"].replace(bob["id"], "X") == missing.json()["detail"].replace(
        "tok-nope", "X"
    )
    # an admin revokes it: the very next request with it is refused (the cache had it)
    r = await client.post(f"/v1/tokens/{bob['id']}/revoke", headers=admin)
    assert r.status_code == 200 and r.json()["token"]["revoked_by"] == "admin"
    assert not r.json()["own_request"] and not r.json()["already_revoked"]
    assert (await client.get("/v1/whoami", headers=bearer(bob["token"]))).status_code == 401
    r = await client.post(f"/v1/tokens/{bob['id']}/revoke", headers=admin)
    assert r.status_code == 200 and r.json()["already_revoked"]
    # an admin's `tp token revoke` (mine) of another's: as if it did not exist
    r = await client.post(f"/v1/tokens/{alice['id']}/revoke?mine=true", headers=admin)
    assert r.status_code == 404
    # revoking the token of the request itself: allowed, and said
    r = await client.post(f"/v1/tokens/{alice['id']}/revoke", headers=bearer(alice["token"]))
    assert r.status_code == 200 and r.json()["own_request"]
    assert (await client.get("/v1/whoami", headers=bearer(alice["token"]))).status_code == 401


async def test_the_last_admin_token_is_kept(client: Any, ctx: Context) -> None:
    first = bearer(await create_token(ctx, "admin"))
    [mine] = (await client.get("/v1/tokens?mine=true", headers=first)).json()
    r = await client.post(f"/v1/tokens/{mine['id']}/revoke", headers=first)
    assert r.status_code == 409 and "last token that can act as an admin" in r.json()["detail"]
    second = (await client.post("/v1/users/admin/tokens", headers=first)).json()
    r = await client.post(f"/v1/tokens/{mine['id']}/revoke", headers=bearer(second["token"]))
    assert r.status_code == 200
    r = await client.post(f"/v1/tokens/{second['id']}/revoke", headers=bearer(second["token"]))
    assert r.status_code == 409


async def test_last_use_is_written_at_most_once_a_minute(ctx: Context, clock: FakeClock) -> None:
    secret = await create_token(ctx, "alice")
    principal = await authenticate(ctx, secret)
    for step, written in ((0, T0), (30, T0), (30, T0 + LAST_USED_PRECISION)):
        clock.advance(seconds=step)
        await authenticate(ctx, secret)
        async with ctx.units.fleet() as uow:
            token = await uow.tokens.get(principal.token_id)
        assert token is not None and token.last_used_at == written
    clock.advance(days=1)
    async with ctx.units.fleet() as uow:
        await uow.tokens.revoke(principal.token_id, "alice", clock.now())
        await uow.commit()
    with pytest.raises(Unauthenticated, match="unknown, expired or revoked"):
        await authenticate(ctx, secret)
    async with ctx.units.fleet() as uow:
        token = await uow.tokens.get(principal.token_id)
    assert token is not None and token.last_used_at == T0 + LAST_USED_PRECISION  # not a use
