"""HEAD wherever GET is (entrypoints/api/head.py), against a live `tp serve`: the GET's status
and headers, no body, the same checks (a token, a route); a streamed GET's HEAD ends at its
headers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from litestar import Litestar, get
from litestar.response import Stream
from litestar.testing import AsyncTestClient

from entrypoints.api.head import head_as_get
from tests.fixtures.server import Servers

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(module_api_server: Servers) -> AsyncIterator[httpx.AsyncClient]:
    servers = module_api_server
    async with httpx.AsyncClient(base_url=servers.url, headers=servers.headers, timeout=30) as c:
        yield c


async def test_head_answers_as_get_without_the_body(client: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/v1/jobs", "/v1/whoami", "/v1/fleet"):
        got, head = await client.get(path), await client.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
        assert head.headers["content-length"] == str(len(got.content)), path
    anonymous = await client.head("/v1/jobs", headers={"Authorization": ""})
    assert (anonymous.status_code, anonymous.content) == (401, b"")  # the same checks as GET
    assert (await client.head("/v1/nope")).status_code == 404
    post_only = await client.head("/v1/previews")
    assert post_only.status_code == 405 and "POST" in post_only.headers["allow"]
    assert (await client.get("/healthz")).json()  # the connection still answers after HEADs


async def test_a_streamed_get_is_ended_at_its_headers() -> None:
    # a followed log never ends: a HEAD that waited for the route to finish would never answer
    @get("/follow")
    async def follow() -> Stream:
        async def forever() -> AsyncIterator[bytes]:
            while True:
                yield b"line\n"
                await asyncio.sleep(0.01)

        return Stream(forever(), media_type="text/plain")

    async with AsyncTestClient(app=head_as_get(Litestar([follow]))) as c:
        head = await asyncio.wait_for(c.head("/follow"), 30)
        assert (head.status_code, head.content) == (200, b"")
        assert head.headers["content-type"].startswith("text/plain")
