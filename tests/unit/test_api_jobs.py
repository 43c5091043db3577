"""GET /v1/jobs filters and paging, and GET /v1/jobs/{id}/events (the timeline), in-process
(litestar's test client over in-memory adapters; the PostgreSQL side of the timeline is in
tests/contract/test_job_events.py, the browser side in tests/e2e/test_console.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application import fleet, submissions
from application.auth import create_token
from application.context import Context
from domain.auth import Principal
from domain.fleet import Queue, SchedState
from entrypoints.api.app import create_app
from tests.support.context import ADMIN, ALICE, BOB, FakeClock, memory_context
from tests.unit.builders import T0, an_intent

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ctx(tmp_path: Path, clock: FakeClock) -> Context:
    return memory_context(tmp_path, MemoryBackend(), clock)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        yield c


async def auth(ctx: Context, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await create_token(ctx, name)}"}


async def submit(ctx: Context, who: Principal, queue: str | None = None) -> str:
    preview = await submissions.create_preview(ctx, who, an_intent(queue=queue))
    receipt = await submissions.commit(ctx, who, preview.id, preview.digest, str(uuid.uuid4()))
    return receipt.job_id


async def test_the_timeline_shows_preview_commit_and_cancel(
    client: Any, ctx: Context, clock: FakeClock
) -> None:
    alice = await auth(ctx, "alice")
    preview = await submissions.create_preview(ctx, ALICE, an_intent())
    clock.advance(minutes=1)
    receipt = await submissions.commit(ctx, ALICE, preview.id, preview.digest, str(uuid.uuid4()))
    clock.advance(minutes=1)
    job_id = receipt.job_id
    assert (await client.post(f"/v1/jobs/{job_id}/cancel", headers=alice)).status_code == 202

    answer = await client.get(f"/v1/jobs/{job_id}/events", headers=alice)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["job_id"] == job_id
    assert [(e["stage"], e["state"], e["reason"]) for e in body["events"]] == [
        ("previewed", None, ""),
        ("committed", "pending", ""),
        ("cancelled", "cancelled", "cancelled before it started"),
    ]
    times = [e["at"] for e in body["events"]]
    assert times[0].startswith(T0.isoformat()[:19]) and times == sorted(times)
    assert len(set(times)) == 3

    one = await client.get(f"/v1/jobs/{job_id}/events", params={"limit": 1}, headers=alice)
    assert [e["stage"] for e in one.json()["events"]] == ["previewed"]
    # same visibility as GET /v1/jobs/{id}: another member gets 404, a viewer sees it
    bob = await client.get(f"/v1/jobs/{job_id}/events", headers=await auth(ctx, "bob"))
    assert bob.status_code == 404 and "tp job ls" in bob.json()["fix"]
    vera = await client.get(f"/v1/jobs/{job_id}/events", headers=await auth(ctx, "vera"))
    assert vera.status_code == 200
    assert (await client.get(f"/v1/jobs/{job_id}/events")).status_code == 401
    bad = await client.get(f"/v1/jobs/{job_id}/events", params={"limit": 0}, headers=alice)
    assert bad.status_code in (400, 422)


async def test_list_filters_by_queue_and_owner_and_pages(client: Any, ctx: Context) -> None:
    async with ctx.uow() as uow:
        await uow.policy.put_queue(Queue("night", "default"))
        await uow.commit()
    night = [await submit(ctx, ALICE, "night") for _ in range(3)]
    day = await submit(ctx, ALICE)
    bobs = await submit(ctx, BOB, "night")
    alice, vera = await auth(ctx, "alice"), await auth(ctx, "vera")

    seen: list[str] = []
    params: dict[str, Any] = {"queue": "night", "limit": 2}
    for _ in range(3):
        page = (await client.get("/v1/jobs", params=params, headers=alice)).json()
        seen += [j["id"] for j in page["jobs"]]
        if not page["next_cursor"]:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == night[::-1]  # alice's own, newest first, across two pages

    default = (await client.get("/v1/jobs", params={"queue": "default"}, headers=alice)).json()
    assert [j["id"] for j in default["jobs"]] == [day]
    by_bob = await client.get("/v1/jobs", params={"owner": "bob"}, headers=vera)
    assert [j["id"] for j in by_bob.json()["jobs"]] == [bobs]
    everyone_night = await client.get(
        "/v1/jobs", params={"queue": "night", "everyone": "true"}, headers=vera
    )
    assert [j["id"] for j in everyone_night.json()["jobs"]] == [bobs, *night[::-1]]
    own = await client.get("/v1/jobs", params={"owner": "alice", "queue": "x"}, headers=alice)
    assert own.status_code == 200
    assert own.json() == {"jobs": [], "next_cursor": None, "pending_total": None}

    refused = await client.get("/v1/jobs", params={"owner": "bob"}, headers=alice)
    assert refused.status_code == 403
    assert "bob" in refused.json()["detail"] and "owner=" in refused.json()["fix"]


async def test_a_previews_estimated_wait(client: Any, ctx: Context) -> None:
    alice = await auth(ctx, "alice")
    preview = await submissions.create_preview(ctx, ALICE, an_intent())
    now = (await client.get(f"/v1/previews/{preview.id}/wait", headers=alice)).json()
    assert (now["starts_now"], now["kind"], now["ahead"]) == (True, "placing", 0)
    assert now["placements"] == [
        {"role": "main", "request": "1 CPU in pool local", "pool": "local",
         "fleet": "local", "backend": "local"}
    ]  # fmt: skip

    await submit(ctx, ALICE)  # pending (no supervisor here): ahead of the preview in the queue
    await fleet.set_node_state(ctx, ADMIN, "local", SchedState.CORDONED)
    later = (await client.get(f"/v1/previews/{preview.id}/wait", headers=alice)).json()
    assert later["starts_now"] is False
    assert (later["position"], later["pending_total"], later["ahead"]) == (2, 2, 1)
    assert "cordoned" in later["text"]
    # nothing was created by asking
    listed = (await client.get("/v1/jobs", headers=alice)).json()["jobs"]
    assert len(listed) == 1

    other = await client.get(f"/v1/previews/{preview.id}/wait", headers=await auth(ctx, "bob"))
    assert other.status_code == 404


async def test_a_commit_replayed_with_a_wrong_digest_is_409_digest_mismatch(
    client: Any, ctx: Context
) -> None:
    """The same retry key and preview with another digest: 409 naming the digest and its fix,
    as a first commit with it gets, not 422 "retry key already used for preview P"."""
    preview = await submissions.create_preview(ctx, ALICE, an_intent())
    body = {"preview_id": preview.id, "digest": preview.digest, "retry_key": str(uuid.uuid4())}
    headers = await auth(ctx, "alice")
    made = await client.post("/v1/jobs", json=body, headers=headers)
    assert made.status_code == 201, made.text
    wrong = await client.post(
        "/v1/jobs", json=body | {"digest": "sha256:" + "1" * 64}, headers=headers
    )
    assert wrong.status_code == 409, wrong.text
    problem = wrong.json()
    assert "does not match preview" in problem["detail"] and problem["field"] == "digest"
    assert "tp submit --preview" in problem["fix"]
    same = await client.post("/v1/jobs", json=body, headers=headers)
    assert same.status_code == 200 and same.json()["job_id"] == made.json()["job_id"]
