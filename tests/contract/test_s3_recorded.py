"""Contract: the S3 blob store maps Amazon S3's documented responses to the right domain errors.

Each response of s3_recorded_responses.json (status, error code, the sources in AWS's
documentation) is served, as S3 shapes it (an XML <Error> body, none for HEAD), by a local
aiohttp server that stands in for S3's endpoint; the real adapter with the real SDK talks to
it. Only the recorded call answers with the recorded response; a HEAD that a put sends first
gets S3's 404 for "not there", and anything else a 501 that fails the test.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.blobs_s3 import Misconfigured, S3BlobStore, S3Location
from domain.errors import NotFound, Unavailable

pytestmark = pytest.mark.contract

RECORDED = json.loads((Path(__file__).parent / "s3_recorded_responses.json").read_text())
ERRORS = {"NotFound": NotFound, "Misconfigured": Misconfigured, "Unavailable": Unavailable}
DIGEST = "sha256:" + "ab" * 32


def error_body(code: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
        f"{code}</Code><Message>recorded {code}</Message>"
        "<RequestId>4442587FB7D0A2F9</RequestId><HostId>recorded</HostId></Error>"
    ).encode()


@dataclass
class FakeEndpoint:
    """Answers the recorded call with the recorded response; remembers every request."""

    response: dict[str, Any] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(f"{request.method} {request.path}")
        await request.read()
        wanted = self.response
        if request.method == wanted["method"]:
            code = wanted["code"]
            if request.method == "HEAD" or code is None:  # S3 sends no body with HEAD
                return web.Response(status=wanted["status"])
            return web.Response(
                status=wanted["status"], body=error_body(code), content_type="application/xml"
            )
        if request.method == "HEAD":  # a put looks for the blob first: not there
            return web.Response(status=404)
        return web.Response(status=501, text=f"unexpected {request.method} {request.path}")


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeEndpoint, str]]:
    endpoint = FakeEndpoint()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", endpoint.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield endpoint, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def once(data: bytes) -> AsyncIterator[bytes]:
    yield data


@pytest.mark.parametrize("recorded", RECORDED["responses"], ids=lambda r: r["name"])
async def test_a_recorded_response_maps_to_its_domain_error(
    fake: tuple[FakeEndpoint, str], recorded: dict[str, Any]
) -> None:
    assert all(source in RECORDED["sources"] for source in recorded["source"])
    endpoint, url = fake
    endpoint.response = recorded
    async with S3BlobStore.connect(
        S3Location("tp-recorded", "blobs/"),
        endpoint_url=url,
        access_key="AKIARECORDED",
        secret_key="recorded-secret",
        max_attempts=1,
    ) as store:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "read": lambda: store.read(DIGEST),
            "size": lambda: store.size(DIGEST),
            "check": store.check,
            "put": lambda: store.put(once(b"content"), 100),
        }
        expect = recorded["expect"]
        if "error" in expect:
            with pytest.raises(ERRORS[expect["error"]], match=expect["match"]) as raised:
                await calls[recorded["call"]]()
            if expect["error"] != "NotFound":  # the operator's problem: name the endpoint
                assert url in raised.value.message
            if expect["error"] == "Unavailable":  # it may come back by itself
                assert not isinstance(raised.value, Misconfigured)
            assert "recorded-secret" not in str(raised.value)
        else:
            assert await calls[recorded["call"]]() == expect["result"]
    assert any(seen.startswith(recorded["method"]) for seen in endpoint.seen)
    assert all(seen.split(" ")[1].startswith("/tp-recorded") for seen in endpoint.seen)
