"""The web console's routes in-process: the built pages are served at /console/ without a token,
with a Content-Security-Policy; a missing build answers 503 with the fix; the API keeps asking
for tokens and the console stays out of the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from application.context import Context
from entrypoints.api.app import create_app
from entrypoints.api.console import CSP, console_router
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    d = tmp_path / "dist"
    (d / "assets").mkdir(parents=True)
    (d / "index.html").write_text('<!doctype html><title>console</title><div id="main"></div>')
    (d / "assets" / "app.js").write_text("console.log('hi')")
    return d


@pytest.fixture
async def client(tmp_path: Path, dist: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    monkeypatch.setenv("TUNEPLANE_CONSOLE_DIR", str(dist))
    ctx: Context = memory_context(tmp_path)
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        yield c


async def test_console_pages_need_no_token_and_carry_a_csp(client: Any) -> None:
    for path in ("/console/", "/console", "/console/index.html"):
        r = await client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        assert '<div id="main">' in r.text
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-frame-options"] == "DENY"
    js = await client.get("/console/assets/app.js")
    assert js.status_code == 200
    assert js.text == "console.log('hi')"
    assert "script-src 'self'" in js.headers["content-security-policy"]


async def test_the_csp_forbids_inline_scripts_and_other_origins() -> None:
    directives = dict(d.split(" ", 1) for d in CSP.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in CSP


async def test_a_missing_file_is_404_and_the_api_still_wants_a_token(client: Any) -> None:
    for path in ("/console/assets/missing.js", "/console/assets/", "/console/nonexistent"):
        missing = await client.get(path)  # an error answer carries the console's headers too
        assert missing.status_code == 404, path
        assert missing.headers["content-security-policy"] == CSP, path
        assert missing.headers["x-frame-options"] == "DENY", path
    assert (await client.get("/v1/whoami")).status_code == 401
    schema = (await client.get("/schema/openapi.json")).json()
    assert not [p for p in schema["paths"] if p.startswith("/console")]


async def test_an_unbuilt_console_says_how_to_build_it(tmp_path: Path) -> None:
    app = Litestar([console_router(tmp_path / "nowhere")])
    async with AsyncTestClient(app=app) as c:
        for path in ("/console/", "/console/jobs/x"):
            r = await c.get(path)
            assert r.status_code == 503
            assert "npm run build" in r.text
            assert str(tmp_path / "nowhere") in r.text
            assert r.headers["content-security-policy"] == CSP
