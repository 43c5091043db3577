"""The preview's typed ``summary`` (what the console says in words) and the archive limits
route, in-process (litestar's test client over in-memory adapters and a real blob store). The
console reading them against a real server: tests/e2e/test_console_submit.py."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from application.auth import create_token
from application.context import Context
from domain import tarball
from domain.fleet import Pool
from entrypoints.api.app import create_app
from tests.support.context import LOCAL_POOL, memory_context

pytestmark = pytest.mark.unit
GPU_POOL = Pool("gpu-a", "f", "local", 8, 64.0, 512000, "h200")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, pools=(LOCAL_POOL, GPU_POOL), nodes=2)


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        c.headers["Authorization"] = f"Bearer {await create_token(ctx, 'admin')}"
        yield c


async def test_the_summary_says_what_the_spec_resolved(client: Any, ctx: Context) -> None:
    body = gzip.compress(tarball.pack({"train.sh": b"echo hi\n"}), mtime=0)
    source = (await client.post("/v1/archives", content=body)).json()
    intent = {
        "experiment": "e", "method": "custom/custom", "profile": "h200:16",
        "params": {"command": "sh train.sh"}, "source": source, "env": {"B": "2", "A": "1"},
        "retry": {"max_attempts": 3},
    }  # fmt: skip
    made = await client.post("/v1/previews", json=intent)
    assert made.status_code == 201, made.text
    summary = made.json()["summary"]
    spec = made.json()["spec"]
    assert summary["backend"] == spec["backend"] == "local" and summary["queue"] == "default"
    assert summary["roles"] == [
        {"name": "main", "profile": "h200:16", "pool": "gpu-a", "members": 2, "gpus": 8,
         "gpu_model": "h200", "cpus": spec["roles"][0]["resources"]["cpus"],
         "memory_mb": spec["roles"][0]["resources"]["memory_mb"],
         "words": "2×8 h200 GPUs in pool gpu-a"}
    ]  # fmt: skip
    runtime = spec["runtime"]
    assert summary["runtime"] == {k: runtime[k] for k in ("name", "image", "digest")}
    assert summary["retry"].startswith("3 attempts, a new one after") and (
        summary["retry_attempts"] == 3
    )
    assert summary["source"] == source and summary["env"] == ["A", "B"]
    assert summary["plugins"] == [] and summary["command"] == spec["command"]

    cpu = await client.post("/v1/previews", json=intent | {"profile": "cpu:1", "retry": None})
    assert cpu.json()["summary"]["roles"][0]["words"] == "1 CPU in pool local"
    assert cpu.json()["summary"]["roles"][0]["gpus"] == 0
    assert cpu.json()["summary"]["retry"] == "no retry (1 attempt)"
    assert cpu.json()["summary"]["source"] == source


async def test_the_archive_limits_are_the_servers_own(client: Any, ctx: Context) -> None:
    limits = (await client.get("/v1/archives/limits")).json()
    assert limits == {
        "max_bytes": ctx.limits.max_archive_bytes,
        "max_unpacked_bytes": ctx.limits.max_archive_unpacked_bytes,
        "max_entries": tarball.MAX_SOURCE_ENTRIES,
        "formats": ["tar.gz", "tar"],
    }
    anonymous = await client.get("/v1/archives/limits", headers={"Authorization": ""})
    assert anonymous.status_code == 401
