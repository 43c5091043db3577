"""Idempotent submission under concurrency, through two real API processes on one PostgreSQL.

docs/architecture.md ("The submission path"): the same (preview id, digest, retry key) returns
the same receipt however often and however concurrently; the same retry key with another
preview is refused (422); a stale or expired preview is refused and no job is made.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.fixtures.server import ServersFactory
from tests.support.db import count_rows, table_counts

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLIENTS = 50
COMMITS = 1000


def intent(command: str = "echo hello") -> dict[str, Any]:
    return {
        "experiment": "hello",
        "method": "custom/custom",
        "profile": "cpu:1",
        "params": {"command": command},
    }


async def _preview(
    client: httpx.AsyncClient, url: str, command: str = "echo hello"
) -> dict[str, Any]:
    r = await client.post(f"{url}/v1/previews", json=intent(command))
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def _hammer(
    urls: list[str], headers: dict[str, str], body: dict[str, str]
) -> list[httpx.Response]:
    """COMMITS identical commits from CLIENTS concurrent clients, alternating between servers."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(COMMITS):
        queue.put_nowait(i)
    responses: list[httpx.Response] = []

    async def client_loop(n: int) -> None:
        async with httpx.AsyncClient(headers=headers, timeout=60) as client:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                responses.append(
                    await client.post(f"{urls[(i + n) % len(urls)]}/v1/jobs", json=body)
                )

    await asyncio.gather(*(client_loop(n) for n in range(CLIENTS)))
    return responses


async def test_identical_commits_make_exactly_one_job(
    api_servers_factory: ServersFactory, pg_url: str
) -> None:
    servers = await api_servers_factory(2)
    async with httpx.AsyncClient(headers=servers.headers, timeout=30) as client:
        preview = await _preview(client, servers.url)
    body = {
        "preview_id": preview["id"],
        "digest": preview["digest"],
        "retry_key": str(uuid.uuid4()),
    }

    responses = await _hammer(servers.urls, servers.headers, body)

    assert len(responses) == COMMITS
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 200: COMMITS - 1}, statuses
    job_ids = {r.json()["job_id"] for r in responses}
    assert len(job_ids) == 1
    assert all(r.json()["job"]["id"] in job_ids for r in responses)
    assert await count_rows(pg_url, "jobs") == 1
    assert await count_rows(pg_url, "submissions") == 1


async def test_reused_retry_key_with_another_preview_is_refused_every_time(
    api_servers_factory: ServersFactory, pg_url: str
) -> None:
    servers = await api_servers_factory(2)
    key = str(uuid.uuid4())
    async with httpx.AsyncClient(headers=servers.headers, timeout=30) as client:
        first = await _preview(client, servers.url, "echo first")
        other = await _preview(client, servers.url, "echo other")
        r = await client.post(
            f"{servers.url}/v1/jobs",
            json={"preview_id": first["id"], "digest": first["digest"], "retry_key": key},
        )
        assert r.status_code == 201
    before = await table_counts(pg_url)

    body = {"preview_id": other["id"], "digest": other["digest"], "retry_key": key}
    responses = await _hammer(servers.urls, servers.headers, body)

    assert Counter(r.status_code for r in responses) == {422: COMMITS}
    problem = responses[0].json()
    assert problem["field"] == "retry_key" and "fresh key" in problem["fix"]
    assert responses[0].headers["content-type"].startswith("application/problem+json")
    after = await table_counts(pg_url)
    assert after["jobs"] == before["jobs"] == 1 and after["submissions"] == before["submissions"]
    assert await count_rows(pg_url, "jobs", "preview_id = $1", other["id"]) == 0


async def test_expired_and_tampered_previews_make_no_job(
    api_servers_factory: ServersFactory, pg_url: str
) -> None:
    servers = await api_servers_factory(1, TUNEPLANE_PREVIEW_TTL_SECONDS="1")
    async with httpx.AsyncClient(headers=servers.headers, timeout=30) as client:
        fresh = await _preview(client, servers.url)
        tampered = {
            "preview_id": fresh["id"],
            "digest": "sha256:" + "0" * 64,
            "retry_key": str(uuid.uuid4()),
        }
        r = await client.post(f"{servers.url}/v1/jobs", json=tampered)
        assert r.status_code == 409, r.text
        assert r.json()["field"] == "digest" and "--preview" in r.json()["fix"]

        await asyncio.sleep(1.2)
        body = {
            "preview_id": fresh["id"],
            "digest": fresh["digest"],
            "retry_key": str(uuid.uuid4()),
        }
        r = await client.post(f"{servers.url}/v1/jobs", json=body)
        assert r.status_code == 410, r.text
        assert "preview again" in r.json()["fix"] or "--preview" in r.json()["fix"]
    counts = await table_counts(pg_url)
    assert counts["jobs"] == 0 and counts["submissions"] == 0
