"""The edge checks every request gets (entrypoints/api/guard.py), on every route of the app,
in-process over in-memory adapters; the PostgreSQL side (what was a 500 there) is in
tests/e2e/test_bad_input.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application.auth import create_token
from application.context import Context
from entrypoints.api.app import create_app
from entrypoints.api.guard import MAX_DEPTH, check_json
from entrypoints.api.problems import MalformedRequest
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


@pytest.fixture
def app(tmp_path: Path) -> Litestar:
    return create_app(memory_context(tmp_path, MemoryBackend()), supervise=False)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[Any]:
    ctx: Context = app.state.ctx
    headers = {"Authorization": f"Bearer {await create_token(ctx, 'admin')}"}
    async with AsyncTestClient(app=app) as c:
        c.headers.update(headers)
        yield c


def _operations(app: Litestar) -> list[tuple[str, str]]:
    """(method, path with every path parameter holding a NUL) of every API route."""
    out: list[tuple[str, str]] = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or route.path.startswith(("/schema", "/console")):
            continue
        path = re.sub(r"\{[^}]+\}", "a%00b", route.path)
        out += [(m, path) for m in route.route_handler_map if m not in ("OPTIONS", "HEAD")]
    return out


async def test_a_nul_in_any_path_or_query_parameter_is_400(app: Litestar, client: Any) -> None:
    operations = _operations(app)
    assert len(operations) > 40
    for method, path in operations:
        if "%00" not in path:
            continue
        r = await client.request(method, path)
        assert r.status_code == 400, (method, path, r.text)
        assert r.json()["field"] == "path" and "NUL" in r.json()["detail"]
    for method, path in operations:  # any query parameter, declared or not
        if "%00" in path:
            continue
        r = await client.request(method, path, params={"owner": "x\x00"})
        assert r.status_code == 400, (method, path, r.text)
        assert r.json()["field"] == "query.owner"


async def test_unsupported_methods_answer_405_with_allow(client: Any) -> None:
    for method in ("TRACE", "PUT", "DELETE"):
        r = await client.request(method, "/v1/jobs")
        assert r.status_code == 405, r.text
        allowed = {m.strip() for m in r.headers["allow"].split(",")}
        assert {"GET", "POST"} <= allowed and method not in allowed
        assert r.headers["content-type"].startswith("application/problem+json")


def test_check_json_names_the_field() -> None:
    def field(value: object) -> str | None:
        try:
            check_json(value)
        except MalformedRequest as exc:
            return exc.field
        return None

    assert field({"a": [1, "x", {"b": "ok"}], "n": 2**63 - 1, "m": -(2**63)}) is None
    assert field({"a": [1, "x", {"b": "o\x00k"}]}) == "a[2].b"
    assert field({"a\x00": 1}) == "a\\x00"
    assert field({"n": 2**63}) == "n" and field([-(2**63) - 1]) == "body[0]"
    nested: object = "leaf"
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert field(nested) is None
    assert field([nested]) == "body" + "[0]" * MAX_DEPTH


async def test_options_lists_every_method_and_empty_segments_are_404(client: Any) -> None:
    r = await client.options("/v1/jobs")
    assert r.status_code == 204 and r.headers["allow"] == "GET, OPTIONS, POST"
    assert (await client.options("/v1/pools/a")).headers["allow"] == "DELETE, OPTIONS, PATCH, PUT"
    for path in ("/v1/jobs/", "/v1/jobs//cancel", "/v1/users//tokens"):
        r = (
            await client.post(path)
            if "cancel" in path or "tokens" in path
            else await client.get(path)
        )
        assert r.status_code == 404, (path, r.text)
        assert r.json()["field"] == "path" and "empty" in r.json()["detail"]


async def test_the_document_states_what_the_server_enforces(client: Any) -> None:
    """Issue 18, defect 10: patterns, additionalProperties, numeric bounds and the retry key's
    length were missing from /schema/openapi.json."""
    doc = (await client.get("/schema/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    for name in ("PreviewIn", "CommitIn", "PoolIn", "UserIn", "QueueIn", "FleetFile", "PoolEntry"):
        assert schemas[name]["additionalProperties"] is False, name
    assert schemas["PoolIn"]["properties"]["name"]["pattern"] == "^[a-z0-9][a-z0-9._-]{0,62}$"
    retry = schemas["CommitIn"]["properties"]["retry_key"]
    assert (retry["minLength"], retry["maxLength"]) == (16, 128)
    assert schemas["PreviewIn"]["properties"]["env"]["additionalProperties"]["maxLength"] == 65536
    assert schemas["PreviewIn"]["properties"]["profiles"]["items"]["maxLength"] == 128
    curve = doc["paths"]["/v1/jobs/{job_id}/metrics/curve"]["get"]["parameters"]
    start = next(p["schema"] for p in curve if p["name"] == "start")
    assert start["minimum"] == 0
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            answers = op["responses"]
            assert "400" in answers, (method, path)
            for status, answer in answers.items():
                if status[0] == "4":
                    assert list(answer["content"]) == ["application/problem+json"], (path, status)
            for p in op.get("parameters", []):
                if p["in"] == "path":
                    assert p["schema"]["minLength"] == 1 and "404" in answers
    links = doc["paths"]["/v1/previews"]["post"]["responses"]["201"]["links"]
    assert links["POST /v1/jobs"]["requestBody"]["digest"] == "$response.body#/digest"
    job_links = doc["paths"]["/v1/jobs"]["post"]["responses"]["201"]["links"]
    assert "POST /v1/jobs/{job_id}/cancel" in job_links


async def test_a_bad_name_is_400_in_words(client: Any) -> None:
    r = await client.post("/v1/teams", json={"name": "Bad Name"})
    body = r.json()
    assert r.status_code == 400 and body["field"] == "name"
    assert "lower-case letters" in body["detail"]
    r = await client.post("/v1/teams", json={"name": "ok", "colour": "red"})
    assert r.status_code == 400 and "colour" in r.json()["detail"]
