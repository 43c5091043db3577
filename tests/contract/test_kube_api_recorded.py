"""The fake API server (tests/fixtures/kube_api.py) answers as a real kube-apiserver does: each
case makes the request named in tests/contract/kube_api_recorded.json and compares the answer
with the recorded one (volatile values, such as uids, by presence)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fixtures.kube_api import FakeKubeAPI

pytestmark = pytest.mark.contract

RECORDED = json.loads((Path(__file__).parent / "kube_api_recorded.json").read_text())
JOBS = "/apis/batch/v1/namespaces/ml/jobs"
JOB = {
    "metadata": {"name": "tp-a", "labels": {"app.kubernetes.io/managed-by": "tuneplane"}},
    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
}


def _blank(data: Any, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        data = data[key]
    assert last in data, f"{dotted} missing"
    data[last] = "<volatile>"


def same(case: str, answer: Any, key: str = "body") -> None:
    want, got = copy.deepcopy(RECORDED[case][key]), copy.deepcopy(answer)
    for dotted in RECORDED[case].get("volatile", []):
        _blank(want, dotted)
        _blank(got, dotted)
    assert got == want


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeKubeAPI, aiohttp.ClientSession]]:
    fake = FakeKubeAPI()
    await fake.start()
    async with aiohttp.ClientSession(fake.url) as http:
        yield fake, http
    await fake.close()


async def call(http: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any]:
    async with http.request(method, url, **kw) as r:
        return r.status, await r.json()


async def test_already_exists(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    _, http = api
    assert (await call(http, "POST", JOBS, json=JOB))[0] == 201
    code, body = await call(http, "POST", JOBS, json=JOB)
    assert code == RECORDED["already_exists"]["code"]
    same("already_exists", body)


async def test_not_found(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    code, body = await call(api[1], "GET", "/api/v1/namespaces/ml/pods/nope")
    assert code == 404
    same("not_found", body)


async def test_invalid(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    bad = {**JOB, "metadata": {"name": "Bad_Name"}}
    code, body = await call(api[1], "POST", JOBS, json=bad)
    assert code == 422
    same("invalid", body)


async def test_delete_in_the_background(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    _, http = api
    await call(http, "POST", JOBS, json=JOB)
    query = {"propagationPolicy": "Background"}
    code, body = await call(http, "DELETE", JOBS + "/tp-a", params=query)
    assert code == 200
    same("deleted_background", body)


async def test_list(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    code, body = await call(api[1], "GET", JOBS, params={"labelSelector": "x=y"})
    assert code == 200
    same("list", body)


async def test_strategic_merge_patch_of_a_custom_resource(
    api: tuple[FakeKubeAPI, aiohttp.ClientSession],
) -> None:
    fake, http = api
    fake.create("rayjobs", "ml", {"metadata": {"name": "tp-a"}, "spec": {}})
    headers = {"Content-Type": "application/strategic-merge-patch+json"}
    url = "/apis/ray.io/v1/namespaces/ml/rayjobs/tp-a"
    code, body = await call(http, "PATCH", url, data=b'{"spec": {}}', headers=headers)
    assert code == 415
    same("unsupported_patch", body)


async def _first_event(http: aiohttp.ClientSession, params: dict[str, str]) -> Any:
    query = {"watch": "true", "timeoutSeconds": "5", **params}
    async with http.get("/api/v1/namespaces/ml/pods", params=query) as r:
        assert r.status == 200
        return json.loads(await r.content.readline())


async def test_watch_from_a_compacted_version_is_410_expired(
    api: tuple[FakeKubeAPI, aiohttp.ClientSession],
) -> None:
    fake, http = api
    old = str(fake.rv)
    fake.create("pods", "ml", {"metadata": {"name": "p"}})
    fake.compact()
    event = await _first_event(http, {"resourceVersion": old})
    same("watch_expired", event, key="event")


async def test_bookmarks(api: tuple[FakeKubeAPI, aiohttp.ClientSession]) -> None:
    fake, http = api
    query = {"watch": "true", "timeoutSeconds": "5", "allowWatchBookmarks": "true"}
    query["resourceVersion"] = str(fake.rv)
    async with http.get("/api/v1/namespaces/ml/pods", params=query) as r:
        await fake.watching("pods")
        fake.bookmark()
        event = json.loads(await r.content.readline())
    same("bookmark", event, key="event")


async def test_the_status_subresource_takes_only_status(
    api: tuple[FakeKubeAPI, aiohttp.ClientSession],
) -> None:
    """As a real server: PATCH of the object ignores ``status``; PATCH of ``/status`` changes
    only ``status`` (kube-apiserver's status strategies reset the other part)."""
    _, http = api
    await call(http, "POST", JOBS, json=JOB)
    merge = {"Content-Type": "application/merge-patch+json"}
    both = json.dumps({"spec": {"suspend": True}, "status": {"active": 1}}).encode()
    code, body = await call(http, "PATCH", JOBS + "/tp-a", data=both, headers=merge)
    assert code == 200 and body["spec"]["suspend"] is True and body["status"] == {}
    code, body = await call(http, "PATCH", JOBS + "/tp-a/status", data=both, headers=merge)
    assert code == 200 and body["status"] == {"active": 1} and body["spec"]["suspend"] is True
    both = json.dumps({"spec": {"suspend": False}}).encode()
    code, body = await call(http, "PATCH", JOBS + "/tp-a/status", data=both, headers=merge)
    assert body["spec"]["suspend"] is True
