"""The plugin routes in-process (litestar's test client over in-memory adapters and a real
blob store): publishing is idempotent and a published version never changes, listing groups by
purpose, admins alone disable, and the preview refuses a disabled or tampered plugin and ships
a good one in the Job Capsule. The real server, PostgreSQL and CLI: tests/e2e/test_plugins.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application.auth import create_token
from application.context import Context
from domain import tarball
from domain.capsule import StorageCapabilities
from domain.plugins import open_package
from entrypoints.api.app import create_app
from tests.support.archives import member_bytes
from tests.support.context import memory_context

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[2] / "docs/examples/plugins/exact-match"


def example(**changed: bytes) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in EXAMPLE.iterdir()} | changed


def upload(files: dict[str, bytes], digest: str | None = None) -> dict[str, Any]:
    body = gzip.compress(tarball.pack(files), mtime=0)
    headers = {"X-Plugin-Digest": digest or open_package(files).digest}
    return {"content": body, "headers": headers}


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return memory_context(tmp_path, MemoryBackend(storage=StorageCapabilities(capsule=True)))


@pytest.fixture
async def client(ctx: Context) -> AsyncIterator[Any]:
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        c.headers["Authorization"] = f"Bearer {await create_token(ctx, 'admin')}"
        yield c


async def as_user(ctx: Context, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await create_token(ctx, name)}"}


def preview_body(digest: str | None = None) -> dict[str, Any]:
    return {
        "experiment": "scorer", "method": "custom/custom", "profiles": ["cpu:1"],
        "params": {"command": "sh /tuneplane/capsule/plugins/exact-match/score.sh p r"},
        "plugins": [{"name": "exact-match", "version": "1.0.0", "digest": digest}],
    }  # fmt: skip


async def test_publish_is_idempotent_and_a_version_never_changes(client: Any, ctx: Context) -> None:
    first = await client.post("/v1/plugins", **upload(example()))
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["name"], body["version"], body["executes"]) == ("exact-match", "1.0.0", "workload")
    assert body["digest"] == open_package(example()).digest and body["files"] == 3
    again = await client.post("/v1/plugins", **upload(example()))
    assert again.status_code == 200 and again.json()["digest"] == body["digest"]

    changed = example(**{"score.sh": b"echo different\n"})
    refused = await client.post("/v1/plugins", **upload(changed))
    assert refused.status_code == 409
    problem = refused.json()
    assert body["digest"] in problem["detail"] and open_package(changed).digest in problem["detail"]
    assert "bump the version" in problem["fix"] and "1.0.1" in problem["fix"]

    lying = await client.post("/v1/plugins", **upload(changed, digest=body["digest"]))
    assert lying.status_code == 422 and lying.json()["field"] == "header.X-Plugin-Digest"
    garbage = await client.post("/v1/plugins", content=b"no tar" * 100)
    assert garbage.status_code == 422 and "not a readable tar" in garbage.json()["detail"]
    no_toml = await client.post("/v1/plugins", **upload({"score.sh": b"x"}, "sha256:" + "0" * 64))
    assert no_toml.status_code == 422 and no_toml.json()["field"] == "plugin.toml"

    vera = await as_user(ctx, "vera")
    viewer = await client.post("/v1/plugins", content=upload(example())["content"], headers=vera)
    assert viewer.status_code == 403
    node = example(**{"plugin.toml": example()["plugin.toml"].replace(
        b'executes = "workload"', b'executes = "node"').replace(b"1.0.0", b"2.0.0")})  # fmt: skip
    member = await as_user(ctx, "alice")
    answer = await client.post("/v1/plugins", content=upload(node)["content"], headers=member)
    assert answer.status_code == 403 and "only admins" in answer.json()["detail"]
    assert (await client.post("/v1/plugins", **upload(node))).status_code == 201  # an admin


async def test_listing_by_group_and_reading(client: Any) -> None:
    assert (await client.post("/v1/plugins", **upload(example()))).status_code == 201
    listed = (await client.get("/v1/plugins")).json()["groups"]
    assert [g["group"] for g in listed] == ["algorithm", "data-prep", "evaluation", "reward",
                                             "export"]  # fmt: skip
    (plugin,) = next(g for g in listed if g["group"] == "evaluation")["plugins"]
    assert plugin["executes"] == "workload" and "Job Capsule" in plugin["executes_description"]
    assert [c["name"] for c in plugin["capabilities"]] == ["read-outputs", "write-outputs"]
    assert all(c["description"] for c in plugin["capabilities"])
    reward = (await client.get("/v1/plugins", params={"group": "reward"})).json()["groups"]
    assert reward == [{"group": "reward", "description": reward[0]["description"], "plugins": []}]
    bad = await client.get("/v1/plugins", params={"group": "training"})
    assert bad.status_code == 422 and bad.json()["field"] == "group"

    versions = (await client.get("/v1/plugins/exact-match")).json()
    assert [v["version"] for v in versions["versions"]] == ["1.0.0"]
    detail = (await client.get("/v1/plugins/exact-match/1.0.0")).json()
    assert {f["path"] for f in detail["manifest"]} == {"plugin.toml", "score.sh", "README.md"}
    sha = hashlib.sha256(example()["score.sh"]).hexdigest()
    assert any(f["sha256"] == sha for f in detail["manifest"])
    missing = await client.get("/v1/plugins/exact-match/9.9.9")
    assert missing.status_code == 404 and "1.0.0" in missing.json()["fix"]
    assert (await client.get("/v1/plugins/nothing")).status_code == 404
    assert (await client.get("/v1/plugins/Bad_Name")).status_code == 422


def capsule_files(ctx_dir: Path, spec: dict[str, Any]) -> dict[str, bytes]:
    digest = spec["capsule"]["blob"].removeprefix("sha256:")
    data = (ctx_dir / "blobs" / "sha256" / digest[:2] / digest).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: member_bytes(tar, m) for m in tar if m.isreg()}


async def test_preview_carries_the_plugin_and_refuses_a_disabled_one(
    client: Any, ctx: Context, tmp_path: Path
) -> None:
    published = (await client.post("/v1/plugins", **upload(example()))).json()
    made = await client.post("/v1/previews", json=preview_body(published["digest"]))
    assert made.status_code == 201, made.text
    spec = made.json()["spec"]
    (use,) = spec["plugins"]
    assert use == {"name": "exact-match", "version": "1.0.0", "digest": published["digest"],
                   "group": "evaluation", "executes": "workload",
                   "path": "/tuneplane/capsule/plugins/exact-match"}  # fmt: skip
    files = capsule_files(tmp_path, spec)
    assert files["tuneplane/capsule/plugins/exact-match/score.sh"] == example()["score.sh"]
    sums = files["tuneplane/capsule/SHA256SUMS"].decode()
    assert (
        f"{hashlib.sha256(example()['score.sh']).hexdigest()}  plugins/exact-match/score.sh" in sums
    )

    member = await as_user(ctx, "alice")
    why = {"reason": "scores are wrong, use 1.0.1"}
    refused = await client.post("/v1/plugins/exact-match/1.0.0/disable", json=why, headers=member)
    assert refused.status_code == 403
    off = await client.post("/v1/plugins/exact-match/1.0.0/disable", json=why)
    assert off.status_code == 200 and off.json()["disabled"]["by"] == "admin"
    later = await client.post("/v1/previews", json=preview_body(), headers=member)
    assert later.status_code == 409, later.text
    assert "disabled for new submissions by admin" in later.json()["detail"]
    assert "scores are wrong, use 1.0.1" in later.json()["detail"]
    commit = {"preview_id": made.json()["id"], "digest": made.json()["digest"],
              "retry_key": str(uuid.uuid4())}  # fmt: skip
    late = await client.post("/v1/jobs", json=commit)  # previewed before it was disabled
    assert late.status_code == 409 and "scores are wrong" in late.json()["detail"]

    assert (await client.post("/v1/plugins/exact-match/1.0.0/enable")).status_code == 200
    assert (await client.post("/v1/jobs", json=commit)).status_code == 201
    assert (await client.post("/v1/previews", json=preview_body())).status_code == 201
    wrong_pin = await client.post("/v1/previews", json=preview_body("sha256:" + "0" * 64))
    assert wrong_pin.status_code == 409 and "not the pinned" in wrong_pin.json()["detail"]
    unknown = preview_body() | {"plugins": [{"name": "exact-match", "version": "3.0.0"}]}
    answer = await client.post("/v1/previews", json=unknown)
    assert answer.status_code == 422 and "published versions: 1.0.0" in answer.json()["detail"]


async def test_a_tampered_blob_is_refused_until_published_again(
    client: Any, tmp_path: Path
) -> None:
    assert (await client.post("/v1/plugins", **upload(example()))).status_code == 201
    (blob,) = [p for p in (tmp_path / "blobs" / "sha256").rglob("*") if p.is_file()]
    data = blob.read_bytes()
    at = data.find(b"awk -v out")
    assert at > 0
    blob.write_bytes(data[:at] + b"rm -rf -v out" + data[at + len(b"rm -rf -v out") :])
    refused = await client.post("/v1/previews", json=preview_body())
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    # the blob store's own digest check refuses it first (its bytes are not their name)
    assert "failed its integrity check" in detail and "fails its digest check" in detail
    assert "publishing the same directory again" in refused.json()["fix"]
    blob.write_bytes(b"")
    emptied = await client.post("/v1/previews", json=preview_body())
    assert emptied.status_code == 409 and "cannot be read" in emptied.json()["detail"]

    assert (await client.post("/v1/plugins", **upload(example()))).status_code == 200
    assert blob.read_bytes() == data  # the same files again rewrote the blob whole
    assert (await client.post("/v1/previews", json=preview_body())).status_code == 201


async def test_a_workload_plugin_needs_a_backend_that_delivers_the_capsule(
    tmp_path: Path,
) -> None:
    ctx = memory_context(tmp_path, MemoryBackend())  # no capsule
    async with AsyncTestClient(app=create_app(ctx, supervise=False)) as c:
        c.headers["Authorization"] = f"Bearer {await create_token(ctx, 'admin')}"
        assert (await c.post("/v1/plugins", **upload(example()))).status_code == 201
        answer = await c.post("/v1/previews", json=preview_body())
    assert answer.status_code == 422 and "does not deliver" in answer.json()["detail"]
    assert answer.json()["field"] == "intent.plugins[0]"
