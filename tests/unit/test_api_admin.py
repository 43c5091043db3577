"""The fleet, user, team and queue routes in-process (litestar's test client over in-memory
adapters): shapes, status codes, problem answers, and an OpenAPI document that declares them.
The real server over PostgreSQL is exercised by tests/e2e."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from application.auth import create_token
from application.context import Context
from domain.fleet import Pool
from entrypoints.api.app import create_app
from tests.support.context import LOCAL_POOL, memory_context

pytestmark = pytest.mark.unit
A = Pool("a", "main", "local", 8, 96, 1_048_576, "h200")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(LOCAL_POOL, A))


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    app = create_app(ctx, supervise=False)
    async with AsyncTestClient(app=app) as c:
        c.headers["Authorization"] = f"Bearer {await create_token(ctx, 'admin')}"
        yield c


async def as_user(client: Any, ctx: Context, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await create_token(ctx, name)}"}


async def test_fleet_listing_pools_nodes_and_states(client: Any, ctx: Context) -> None:
    r = await client.get("/v1/fleet")
    assert r.status_code == 200
    pools = {p["name"]: p for p in r.json()["pools"]}
    assert pools["a"]["gpus_total"] == 24 and len(pools["a"]["nodes"]) == 3
    node = pools["a"]["nodes"][0]
    assert (node["sched"], node["connectivity"], node["eligible"]) == (
        "schedulable", "connected", True,
    )  # fmt: skip
    body = {"name": "b", "fleet": "main", "backend": "node", "gpu_model": "h100",
            "gpus_per_node": 8, "cpus_per_node": 64, "memory_mb_per_node": 524288}  # fmt: skip
    r = await client.post("/v1/pools", json=body)
    assert r.status_code == 201 and r.json()["gpu_model"] == "h100"
    assert (await client.post("/v1/pools", json=body)).status_code == 409
    r = await client.patch("/v1/pools/b", json={"cpus_per_node": 32})
    assert r.status_code == 200 and r.json()["cpus_per_node"] == 32
    r = await client.patch("/v1/pools/b", json={"gpus_per_node": 0})
    assert r.status_code == 422 and r.json()["field"] == "gpu_model"
    put = {k: v for k, v in body.items() if k != "name"}
    assert (await client.put("/v1/pools/c", json=put)).status_code == 201
    assert (await client.put("/v1/pools/c", json=put)).status_code == 200
    r = await client.post("/v1/nodes", json={"name": "b-0", "pool": "b"})
    assert r.status_code == 201 and r.json()["sched"] == "schedulable"
    r = await client.post("/v1/nodes", json={"name": "b-1", "pool": "nope"})
    assert r.status_code == 404 and r.json()["field"] == "pool"
    for action, sched in (
        ("cordon", "cordoned"),
        ("drain", "draining"),
        ("uncordon", "schedulable"),
    ):
        r = await client.post(f"/v1/nodes/b-0/{action}")
        assert (r.status_code, r.json()["sched"]) == (200, sched)
    r = await client.put("/v1/nodes/b-0", json={"pool": "c"})
    assert r.status_code == 200 and r.json()["pool"] == "c"
    assert (await client.post("/v1/nodes/nope/cordon")).status_code == 404
    alice = await as_user(client, ctx, "alice")
    r = await client.post("/v1/nodes/b-0/cordon", headers=alice)
    assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json"
    assert (await client.get("/v1/fleet", headers=alice)).status_code == 200


async def test_profiles_named_implicit_and_resolved(client: Any) -> None:
    r = await client.post("/v1/profiles", json={"name": "big", "request": "h200:16"})
    assert r.status_code == 200 and r.json()["members"] == 2
    r = await client.post("/v1/profiles", json={"name": "odd", "request": "h200:12"})
    assert r.status_code == 422 and "h200:8 or h200:16" in r.json()["fix"]
    names = [p["name"] for p in (await client.get("/v1/profiles")).json()]
    assert names == ["big", "h200", "h200:N", "cpu:N"]  # named, then pool a's, then local's
    r = await client.get("/v1/profiles/resolve", params={"profile": "big"})
    assert r.status_code == 200
    assert r.json()["roles"][0]["members"] == 2 and r.json()["roles"][0]["pool"] == "a"
    r = await client.get("/v1/profiles/resolve", params={"profile": "h300:1"})
    assert r.status_code == 422 and r.json()["field"] == "intent.profiles[0]"


async def test_users_tokens_teams_and_queues(client: Any, ctx: Context) -> None:
    assert (await client.post("/v1/teams", json={"name": "research"})).status_code == 201
    assert (await client.post("/v1/teams", json={"name": "research"})).status_code == 409
    assert [t["name"] for t in (await client.get("/v1/teams")).json()] == ["default", "research"]
    r = await client.post("/v1/users", json={"name": "carol", "teams": ["research"]})
    assert r.status_code == 201 and r.json()["role"] == "member"
    r = await client.post("/v1/users", json={"name": "dave", "teams": ["nope"]})
    assert r.status_code == 404 and "tp admin team add nope" in r.json()["fix"]
    r = await client.post("/v1/users/carol/tokens")
    assert r.status_code == 201 and r.json()["token"].startswith("tp_")
    carol = {"Authorization": f"Bearer {r.json()['token']}"}
    me = (await client.get("/v1/whoami", headers=carol)).json()
    assert me == {"name": "carol", "role": "member", "teams": ["research"]}
    assert (await client.post("/v1/users/alice/tokens", headers=carol)).status_code == 403
    assert (await client.post("/v1/users/carol/tokens", headers=carol)).status_code == 201
    assert (await client.get("/v1/users", headers=carol)).status_code == 403
    r = await client.post(
        "/v1/queues", json={"name": "r", "team": "research", "priority": 5, "gpu_quota": 16}
    )
    assert r.status_code == 201
    assert r.json() == {"name": "r", "team": "research", "priority": 5, "gpu_quota": 16,
                        "job_quota": None, "max_attempts": None, "gpus_in_use": 0,
                        "jobs_in_use": 0}  # fmt: skip
    r = await client.patch("/v1/queues/r", json={"gpu_quota": None, "job_quota": 2})
    assert (r.json()["gpu_quota"], r.json()["job_quota"], r.json()["priority"]) == (None, 2, 5)
    r = await client.patch("/v1/queues/r", json={"max_attempts": 3})
    assert (r.json()["max_attempts"], r.json()["job_quota"]) == (3, 2)
    for bad in (0, 101, -1, 2.5):
        r = await client.patch("/v1/queues/r", json={"max_attempts": bad})
        assert r.status_code == 400 and r.json()["field"] == "max_attempts", (bad, r.json())
    r = await client.patch("/v1/queues/r", json={"priority": 5000})
    assert r.status_code == 400 and r.json()["field"] == "priority"
    assert (await client.patch("/v1/queues/zz", json={})).status_code == 404
    assert (await client.post("/v1/queues", json={"name": "x", "team": "r"})).status_code == 404
    queues = (await client.get("/v1/queues", headers=carol)).json()
    assert [q["name"] for q in queues] == ["default", "r"]
    r = await client.patch("/v1/users/carol", json={"disabled": True})
    assert r.status_code == 200 and r.json()["disabled"] is True
    # the API caches a principal for a few seconds; a fresh app sees the change at once
    app = create_app(ctx, supervise=False)
    async with AsyncTestClient(app=app) as fresh:
        r = await fresh.get("/v1/whoami", headers=carol)
        assert r.status_code == 401 and "disabled" in r.json()["detail"]


async def test_fleet_apply_all_or_nothing(client: Any) -> None:
    doc = {"fleet": "dc1",
           "pools": [{"name": "b", "backend": "node", "gpu_model": "h100", "gpus_per_node": 8,
                      "cpus_per_node": 64, "memory_mb_per_node": 524288, "nodes": 2}],
           "teams": [{"name": "eval"}],
           "queues": [{"name": "eval", "team": "eval", "gpu_quota": 8}],
           "profiles": [{"name": "pair", "request": "h100:2"}]}  # fmt: skip
    r = await client.post("/v1/fleet/apply", json=doc)
    assert r.status_code == 200, r.text
    assert "node b-1" in r.json()["created"] and r.json()["changed"] == []
    doc["pools"][0]["gpus_per_node"] = "eight"  # type: ignore[index]
    r = await client.post("/v1/fleet/apply", json=doc)
    assert r.status_code == 400 and r.json()["field"] == "pools[0].gpus_per_node"
    doc["pools"][0]["gpus_per_node"] = 99  # type: ignore[index]
    r = await client.post("/v1/fleet/apply", json=doc)
    assert r.status_code == 422 and r.json()["field"] == "pools[0].gpus_per_node"
    doc["pools"][0]["gpus_per_node"] = 16  # type: ignore[index]
    doc["queues"][0]["team"] = "nope"  # type: ignore[index]
    r = await client.post("/v1/fleet/apply", json=doc)
    assert r.status_code == 422 and r.json()["field"] == "queues[0].team"
    pools = {p["name"]: p for p in (await client.get("/v1/fleet")).json()["pools"]}
    assert pools["b"]["gpus_per_node"] == 8  # nothing of the failed apply was written


async def test_openapi_declares_the_new_routes(client: Any) -> None:
    doc = (await client.get("/schema/openapi.json")).json()
    paths = doc["paths"]
    for path, method in [
        ("/v1/fleet", "get"), ("/v1/fleet/apply", "post"), ("/v1/pools", "post"),
        ("/v1/pools/{name}", "put"), ("/v1/pools/{name}", "patch"), ("/v1/nodes", "post"),
        ("/v1/nodes/{name}", "put"), ("/v1/nodes/{name}/cordon", "post"),
        ("/v1/nodes/{name}/drain", "post"), ("/v1/nodes/{name}/uncordon", "post"),
        ("/v1/profiles", "get"), ("/v1/profiles", "post"), ("/v1/profiles/resolve", "get"),
        ("/v1/users", "get"), ("/v1/users", "post"), ("/v1/users/{name}", "patch"),
        ("/v1/users/{name}/tokens", "post"), ("/v1/teams", "get"), ("/v1/teams", "post"),
        ("/v1/queues", "get"), ("/v1/queues", "post"), ("/v1/queues/{name}", "patch"),
        ("/v1/jobs/{job_id}/why", "get"), ("/v1/nodes/{name}/lost", "post"),
    ]:  # fmt: skip
        op = paths[path][method]
        assert op["security"] == [{"BearerToken": []}], (path, method)
        assert "401" in op["responses"], (path, method)


async def test_previews_take_profiles_and_a_queue(client: Any, ctx: Context) -> None:
    body = {"experiment": "hello", "method": "custom/custom", "params": {"command": "echo hi"},
            "profiles": ["h200:8"], "queue": "nope"}  # fmt: skip
    r = await client.post("/v1/previews", json=body)
    assert r.status_code == 404 and r.json()["field"] == "intent.queue"
    r = await client.post("/v1/previews", json={**body, "queue": None})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["queue"] == "default"
    assert r.json()["intent"]["profiles"] == ["h200:8"]
    one = {**body, "queue": "default", "profiles": [], "profile": "cpu:1"}
    assert (await client.post("/v1/previews", json=one)).status_code == 201
    both = {**one, "profiles": ["cpu:1"]}
    r = await client.post("/v1/previews", json=both)
    assert r.status_code == 422 and r.json()["field"] == "profile"
