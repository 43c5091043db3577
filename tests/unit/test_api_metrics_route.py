"""``GET /metrics`` on the API in-process (litestar's test client over in-memory adapters): each
TUNEPLANE_API_METRICS mode, and the request middleware's labels (route templates, never raw
paths; status classes; a bounded method). The live API is scraped in tests/e2e/test_up.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from application.auth import create_token
from entrypoints.api.app import create_app
from entrypoints.api.instrumentation import instrumented
from tests.support.context import memory_context

pytestmark = pytest.mark.unit


def _requests(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "tuneplane_api_requests_total"
    }


@pytest.mark.parametrize(("mode", "anonymous", "with_token"), [
    ("open", 200, 200), ("token", 401, 200), ("off", 404, 404),
])  # fmt: skip
async def test_each_metrics_mode_answers_as_documented(
    tmp_path: Path, mode: str, anonymous: int, with_token: int
) -> None:
    ctx = memory_context(tmp_path)
    app = create_app(ctx, supervise=False, metrics=mode)
    async with AsyncTestClient(app=app) as client:
        token = await create_token(ctx, "admin")
        assert (await client.get("/metrics")).status_code == anonymous
        answer = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == with_token
        if with_token == 200:
            assert answer.headers["content-type"].startswith("text/plain")
            assert "# TYPE tuneplane_api_requests_total counter" in answer.text
        if mode == "open":  # the schema is costly to build: once
            schema = (await client.get("/schema/openapi.json")).json()
            assert "/metrics" not in schema["paths"]  # operators' route, not the API's


async def test_requests_are_counted_by_template_status_class_and_bounded_method(
    tmp_path: Path,
) -> None:
    ctx = memory_context(tmp_path)
    app = instrumented(create_app(ctx, supervise=False))
    async with AsyncTestClient(app=app) as client:
        token = await create_token(ctx, "admin")
        headers = {"Authorization": f"Bearer {token}"}
        before = _requests((await client.get("/metrics")).text)
        await client.get("/v1/jobs/job-secret-1", headers=headers)  # 404: no such job
        await client.get("/v1/jobs/job-secret-2")  # 401: no token
        await client.request("BREW", "/v1/jobs")  # a method no route takes
        await client.get("/nowhere/job-secret-3")
        text = (await client.get("/metrics")).text
    after = _requests(text)
    moved = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert moved[("/v1/jobs/{job_id}", "GET", "4xx")] == 2
    assert moved[("unmatched", "GET", "4xx")] == 1
    assert sum(v for (_, method, _), v in moved.items() if method == "other") == 1
    assert "BREW" not in text and "job-secret" not in text and token not in text
