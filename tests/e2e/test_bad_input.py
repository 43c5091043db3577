"""Bad input over HTTP gets a clear 4xx problem that names the field and the fix, and leaves no
rows (and no stored blobs) behind. Real server process, real PostgreSQL, real container engine.

The module's tests share one server and database (``module_api_server``): none of them makes a
row, so each still asserts that the tables are empty; blobs that a test stores on purpose (a
good archive) are compared before and after instead."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import Servers
from tests.support.db import count_rows, table_counts

pytestmark = pytest.mark.e2e

GOOD = {
    "experiment": "hello",
    "method": "custom/custom",
    "profile": "cpu:1",
    "params": {"command": "true"},
}


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue())


def _problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["detail"]
    return body


@pytest.fixture(scope="module")
def module_api_server_env() -> dict[str, str]:
    return {"TUNEPLANE_MAX_ARCHIVE_BYTES": "4096"}


@pytest.fixture
def pg_url(module_pg_url: str) -> str:
    return module_pg_url  # the tables the shared server writes to


@pytest.fixture
async def client(module_api_server: Servers) -> AsyncIterator[httpx.AsyncClient]:
    servers = module_api_server
    async with httpx.AsyncClient(base_url=servers.url, headers=servers.headers, timeout=30) as c:
        c.state_dir = servers.state_dir  # type: ignore[attr-defined]
        yield c


async def test_malformed_bodies_name_the_field(client: httpx.AsyncClient, pg_url: str) -> None:
    r = await client.post(
        "/v1/previews", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert "JSON" in _problem(r, 400)["detail"] or "json" in r.json()["detail"].lower()

    r = await client.post("/v1/previews", json={**GOOD, "experiment": 7})
    body = _problem(r, 400)
    assert body["field"] == "experiment" and "str" in body["detail"]

    r = await client.post("/v1/previews", json={**GOOD, "colour": "red"})
    assert "colour" in _problem(r, 400)["detail"]

    r = await client.post("/v1/previews", json={**GOOD, "experiment": "Bad Name"})
    body = _problem(r, 400)  # the name pattern the OpenAPI document declares
    assert body["field"] == "experiment" and "lower-case" in body["detail"]

    r = await client.post("/v1/previews", json={k: v for k, v in GOOD.items() if k != "profile"})
    body = _problem(r, 422)  # well-formed, but asks for nothing
    assert body["field"] == "intent.profiles" and "profile" in body["detail"]

    r = await client.post("/v1/jobs", json={"preview_id": "pv-x", "digest": "d"})
    assert "retry_key" in _problem(r, 400)["detail"]
    assert await table_counts(pg_url) == {
        "previews": 0,
        "submissions": 0,
        "jobs": 0,
        "attempts": 0,
        "members": 0,
    }


@pytest.mark.parametrize(
    ("change", "field", "fix_words"),
    [
        ({"profile": "h900:8"}, "intent.profiles[0]", "cpu:N"),
        ({"profile": "cpu:1000.5"}, "intent.profiles[0]", "at most cpu:"),
        ({"profile": "cpu:0.0000001"}, "intent.profiles[0]", "cpu:0.01"),  # defect 8
        ({"profile": "cpu:0.001"}, "intent.profiles[0]", "cpu:0.01"),
        ({"method": "trl/nope"}, "intent.method", "tp methods"),
        ({"runtime": "cobol"}, "intent.runtime", "busybox"),
        ({"params": {}}, "intent.params.command", "--set command"),
        ({"params": {"command": "x", "epochs": 3}}, "intent.params.epochs", "tp methods"),
        # a post-training recipe: its declared limits, and a runtime without its framework
        (
            {"method": "trl/grpo", "params": {"num_generations": "1"}},
            "intent.params.num_generations",
            "at least 2",
        ),
        (
            {"method": "verl/grpo", "params": {"rollout_name": "hf"}},
            "intent.params.rollout_name",
            "vllm, sglang, trtllm",
        ),
        (
            {"method": "trl/sft", "runtime": "python-numpy", "params": {}},
            "intent.runtime",
            "tp runtime add",
        ),
        (
            {"source": {"digest": "sha256:" + "1" * 64, "size": 10}},
            "intent.source.digest",
            "upload",
        ),
        # a retry policy (docs/lifecycles.md#retries)
        ({"retry": {"on": ["cancelled"]}}, "intent.retry.on", "node-lost, preempted"),
        ({"retry": {"max_attempts": 0}}, "intent.retry.max_attempts", "from 1 to 100"),
        ({"retry": {"exit_codes": [300]}}, "intent.retry.exit_codes", "from 1 to 255"),
        (
            {"retry": {"backoff_seconds": 60, "max_backoff_seconds": 10}},
            "intent.retry.max_backoff_seconds",
            "at least backoff_seconds",
        ),
    ],
)
async def test_unresolvable_intents_are_422(
    client: httpx.AsyncClient, pg_url: str, change: dict[str, Any], field: str, fix_words: str
) -> None:
    body = _problem(await client.post("/v1/previews", json={**GOOD, **change}), 422)
    assert body["field"] == field
    assert fix_words in body["fix"], body
    assert (await table_counts(pg_url))["previews"] == 0


async def test_oversized_archive_is_413_and_stores_nothing(client: httpx.AsyncClient) -> None:
    blobs = Path(client.state_dir) / "blobs"  # type: ignore[attr-defined]
    before = _blob_files(client)
    big = bytes(range(256)) * 64  # 16 KiB against a 4 KiB limit
    body = _problem(await client.post("/v1/archives", content=big), 413)
    assert "4096" in body["detail"] and body["fix"]

    async def chunked() -> AsyncIterator[bytes]:
        for _ in range(16):
            yield bytes(range(256)) * 4

    _problem(await client.post("/v1/archives", content=chunked()), 413)  # no content-length
    assert _blob_files(client) == before and list((blobs / "tmp").iterdir()) == []


async def test_archive_digest_header_is_checked(client: httpx.AsyncClient) -> None:
    data = _tar_gz({"train.sh": b"echo digest checked\n"})
    before = _blob_files(client)
    r = await client.post(
        "/v1/archives", content=data, headers={"X-Content-Digest": "sha256:" + "2" * 64}
    )
    assert _problem(r, 422)["field"] == "header.X-Content-Digest"
    assert _blob_files(client) == before  # the mismatching body was not kept
    r = await client.post("/v1/archives", content=data)
    assert r.status_code == 201 and r.json()["size"] == len(data)


async def test_auth_and_unknown_objects(client: httpx.AsyncClient) -> None:
    anon = httpx.AsyncClient(base_url=str(client.base_url))
    body = _problem(await anon.get("/v1/jobs"), 401)
    assert "Authorization" in body["fix"]
    _problem(await anon.get("/v1/jobs", headers={"Authorization": "Bearer tp_wrong"}), 401)
    await anon.aclose()
    _problem(await client.get("/v1/jobs/job-missing"), 404)
    _problem(await client.post("/v1/jobs/job-missing/cancel"), 404)
    _problem(await client.get("/v1/jobs/job-missing/logs"), 404)
    body = _problem(
        await client.post(
            "/v1/jobs",
            json={"preview_id": "pv-missing", "digest": "x", "retry_key": str(uuid.uuid4())},
        ),
        404,
    )
    assert "--preview" in body["fix"]
    r = await client.get("/v1/jobs", params={"limit": 0})
    assert r.status_code == 400 and r.json()["field"]
    r = await client.get("/v1/jobs", params={"state": "sleeping"})
    assert r.status_code == 400


def _blob_files(client: httpx.AsyncClient) -> set[Path]:
    blobs = Path(client.state_dir) / "blobs"  # type: ignore[attr-defined]
    return {p for p in (blobs / "sha256").rglob("*") if p.is_file()}


async def test_nul_and_deep_nesting_are_400_and_write_nothing(
    client: httpx.AsyncClient, pg_url: str
) -> None:
    """Issue 18, defect 7: these were 500s (PostgreSQL cannot store NUL; the decoder recursed
    until RecursionError), and the NUL preview left its capsule blobs behind."""
    before = _blob_files(client)
    for name in ("owner", "queue"):
        body = _problem(await client.get("/v1/jobs", params={name: "a\x00b"}), 400)
        assert body["field"] == f"query.{name}" and "NUL" in body["detail"] and body["fix"]
    assert _problem(await client.get("/v1/jobs/job-%00"), 400)["field"] == "path"

    nul_command = {**GOOD, "params": {"command": "echo a\x00b"}}
    assert _problem(await client.post("/v1/previews", json=nul_command), 400)["field"] == (
        "params.command"
    )
    nul_env = {**GOOD, "env": {"A": "x\x00"}}
    assert _problem(await client.post("/v1/previews", json=nul_env), 400)["field"] == "env.A"

    deep = b"[" * 50_000 + b"]" * 50_000
    for path, doc in (
        ("/v1/previews", b'{"experiment": "hello", "params": {"command": ' + deep + b"}}"),
        ("/v1/fleet/apply", b'{"pools": ' + deep + b"}"),
    ):
        r = await client.post(path, content=doc, headers={"content-type": "application/json"})
        body = _problem(r, 400)
        assert "nested" in body["detail"] and body["field"] == "body", body
    too_deep = b'{"pools": ' + b"[" * 40 + b"]" * 40 + b"}"  # decodable, but past the bound
    r = await client.post(
        "/v1/fleet/apply", content=too_deep, headers={"content-type": "application/json"}
    )
    assert _problem(r, 400)["field"].startswith("pools[0][0]")
    huge = {**GOOD, "params": {"command": "true", "x": 10**30}}
    assert _problem(await client.post("/v1/previews", json=huge), 400)["field"] == "params.x"
    assert await table_counts(pg_url) == dict.fromkeys(
        ("previews", "submissions", "jobs", "attempts", "members"), 0
    )
    assert _blob_files(client) == before


async def test_only_source_archives_the_runner_can_unpack_are_stored_or_previewed(
    client: httpx.AsyncClient, pg_url: str
) -> None:
    """Issue 18, defect 9: any bytes were stored, and the member failed only when the runner
    could not unpack them (exit 94)."""
    before = _blob_files(client)
    for data, words in (
        (b"hello, not an archive", "not a readable gzip-compressed tar"),
        (_tar_gz({"/etc/cron.d/x": b"* * * * * root sh\n"}), "unsafe path"),
        (_tar_gz({"../outside": b"x"}), "unsafe path"),
    ):
        body = _problem(await client.post("/v1/archives", content=data), 422)
        assert words in body["detail"] and body["field"] == "body" and body["fix"]
    assert _blob_files(client) == before
    good = _tar_gz({"train.sh": b"echo hi\n"})
    assert (await client.post("/v1/archives", content=good)).status_code == 201

    # a blob stored before uploads were checked: the preview naming it is refused, and builds
    # no capsule
    junk = b"stored by an older server"
    digest = hashlib.sha256(junk).hexdigest()
    old = Path(client.state_dir) / "blobs" / "sha256" / digest[:2] / digest  # type: ignore[attr-defined]
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(junk)
    before = set(_blob_files(client))
    source = {"digest": "sha256:" + digest, "size": len(junk)}
    body = _problem(await client.post("/v1/previews", json={**GOOD, "source": source}), 422)
    assert body["field"] == "intent.source.digest" and "gzip-compressed tar" in body["detail"]
    assert set(_blob_files(client)) == before
    assert (await table_counts(pg_url))["previews"] == 0


@pytest.mark.parametrize("nan", ["nan", "NaN", "-nan", "inf", "-Infinity", "1e400"])
async def test_a_float_parameter_that_is_no_finite_number_is_422(
    client: httpx.AsyncClient, pg_url: str, nan: str
) -> None:
    """Issue 19, defect 1: NaN passed both range checks and the capsule's canonical JSON
    refused it (500, which the CLI sent five times)."""
    before = _blob_files(client)
    change = {"method": "trl/grpo", "params": {"temperature": nan}}
    body = _problem(await client.post("/v1/previews", json={**GOOD, **change}), 422)
    assert body["field"] == "intent.params.temperature" and "finite" in body["detail"]
    assert "from 0.01 to 10.0" in body["fix"]
    assert (await table_counts(pg_url))["previews"] == 0 and _blob_files(client) == before


def _cursor(doc: str) -> str:
    return base64.urlsafe_b64encode(doc.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "doc",
    [
        '["2026-12-07T22:18:18+00:00","job-\\u0000"]',  # PostgreSQL refuses a NUL
        '["2026-12-07T22:18:18+00:00","job-\\ud800"]',  # and a lone surrogate
        '{"2026-12-07T22:18:18+00:00": 1, "job-x": 2}',
        '["0001-01-01T00:00:00+14:00","job-x"]',
    ],
)
async def test_a_forged_job_list_cursor_is_422(client: httpx.AsyncClient, doc: str) -> None:
    """Issue 19, defect 2: a cursor decoded to text the database refuses was a 500."""
    body = _problem(await client.get("/v1/jobs", params={"cursor": _cursor(doc)}), 422)
    assert body["field"] == "cursor" and "without a cursor" in body["fix"]


PLUGIN_TOML = {
    "name": '"bad-input"', "version": '"1.0.0"', "group": '"evaluation"',
    "description": '"checks"', "capabilities": "[]", "executes": '"workload"',
    "entry": '["sh", "run.sh"]',
}  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("description", '"a\\u0000b"', "control character (\\x00)"),
        ("description", '"\\u001b[31mred"', "control character (\\x1b)"),
        ("entry", '["sh", "a\\u0000"]', "entry[1] holds a control character (\\x00)"),
        ("entry", "[" * 5000 + "]" * 5000, "nested too deep"),
    ],
)
async def test_a_plugin_declaration_with_unstorable_text_is_422_and_stores_nothing(
    client: httpx.AsyncClient, pg_url: str, key: str, value: str, words: str
) -> None:
    """Issue 19, defect 3: a NUL reached PostgreSQL (500), a deep array exhausted the parser's
    stack (500), an escape sequence was published; and the package's blob was stored before
    the refusal."""
    before = _blob_files(client)
    toml = "".join(f"{k} = {value if k == key else v}\n" for k, v in PLUGIN_TOML.items())
    package = _tar_gz({"plugin.toml": toml.encode(), "run.sh": b"echo checked\n"})
    body = _problem(await client.post("/v1/plugins", content=package), 422)
    assert words in body["detail"] and body["field"].startswith("plugin.toml") and body["fix"]
    assert await count_rows(pg_url, "plugins") == 0
    assert _blob_files(client) == before


async def test_a_pool_of_gpu_model_cpu_is_422(client: httpx.AsyncClient, pg_url: str) -> None:
    """Issue 19, defect 4: it was created, and no request could ever reach it (cpu:N asks for a
    CPU pool). ("CPU" is refused by the name pattern already; domain/fleet.py refuses any case.)"""
    pool = {"name": "gpus", "fleet": "main", "backend": "node", "gpu_model": "cpu",
            "gpus_per_node": 8, "cpus_per_node": 64, "memory_mb_per_node": 524288}  # fmt: skip
    body = _problem(await client.post("/v1/pools", json=pool), 422)
    assert body["field"] == "gpu_model" and "cpu:N" in body["detail"] and "h200" in body["fix"]
    assert await count_rows(pg_url, "pools", "name = 'gpus'") == 0
