"""`GET /v1/nodes/{node}/events` in-process (litestar's test client over in-memory adapters):
operators and admins only, a clear 404 and 400, the events most recently seen first, and the
route declared in the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from application.auth import create_token
from application.context import Context
from domain.fleet import Pool
from domain.node_events import KEEP_PER_NODE, NodeEventKind, event
from entrypoints.api.app import create_app
from tests.support.context import memory_context

pytestmark = pytest.mark.unit
POOL = Pool("a", "main", "node", 0, 1.0, 1024)


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(POOL,), nodes=2)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        c.headers["Authorization"] = f"Bearer {await create_token(ctx, 'admin')}"
        yield c


async def test_a_nodes_events_most_recently_seen_first(client: Any, ctx: Context) -> None:
    now = ctx.clock.now()
    async with ctx.uow() as uow:
        for source in ("192.0.2.1", "192.0.2.2", "192.0.2.1"):
            e = event("a-0", NodeEventKind.SESSION_REFUSED, source, now, f"from {source}")
            await uow.node_events.record(e, KEEP_PER_NODE)
        await uow.commit()
    r = await client.get("/v1/nodes/a-0/events")
    assert r.status_code == 200
    assert [(e["source"], e["count"], e["kind"]) for e in r.json()] == [
        ("192.0.2.1", 2, "session-refused"),
        ("192.0.2.2", 1, "session-refused"),
    ]
    assert (await client.get("/v1/nodes/a-0/events?limit=1")).json()[0]["count"] == 2
    assert (await client.get("/v1/nodes/a-1/events")).json() == []
    assert (await client.get("/v1/nodes/a-0/events?limit=0")).status_code == 400
    missing = await client.get("/v1/nodes/nope/events")
    assert missing.status_code == 404 and "node nope does not exist" in missing.text
    assert (await client.get("/v1/nodes/a%00/events")).status_code == 400  # the edge guard
    assert (await client.get("/v1/nodes/a%01/events")).status_code == 422  # InvalidInput
    member = {"Authorization": f"Bearer {await create_token(ctx, 'alice')}"}
    assert (await client.get("/v1/nodes/a-0/events", headers=member)).status_code == 403
    schema = (await client.get("/schema/openapi.json")).json()
    assert "get" in schema["paths"]["/v1/nodes/{node}/events"]
