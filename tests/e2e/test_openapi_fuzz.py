"""Schemathesis against the served OpenAPI document of a real server (`tp serve`, PostgreSQL,
container engine): generated requests, valid and invalid, to every operation, then the stateful
phase, which chains operations through the document's links (a preview to reading and
committing it, a job to everything about it, a pool, node, user, queue or runtime to what
names it). The test: no answer >= 500, and every answer has a status, content type, body and
(for 405 and OPTIONS) ``Allow`` header that the document declares.

``fuzz_hooks.py`` adds what a schema alone rarely yields and broke the server before (issue 18,
defect 7): NUL characters in path, query and body strings and keys, a body nested 50,000 deep,
integers past 64 bits, odd unicode. Run on the code before that fix, this test fails on
`GET /v1/jobs?owner=%00` and on the deep and the NUL bodies (500).

Its size (schemathesis.toml): 25 examples per operation in the stateless phases, 600 scenarios
of up to 20 steps in the stateful one, one worker, one seed: 50 s alone on a 2 GHz core
(docs/http-api.md, "The OpenAPI document"). One worker, not two: two threads of schemathesis
drawing at once failed a CI run with ``SystemError: AST constructor recursion depth mismatch``
from hypothesis' ``ast.parse`` of a filter's source (CPython 3.11 keeps that count for the
whole interpreter, python/cpython#106905); two took 45 s alone against 50.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.e2e.fuzz_hooks import runnable_preview
from tests.fixtures.server import Servers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ST = str(Path(sys.executable).parent / "schemathesis")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "response_schema_conformance",
        "content_type_conformance",
        "status_code_conformance",
        "unsupported_method",
        "allow_header_conformance",
    ]
)


def _seed(server: Servers) -> None:
    """A job for the links to start from; the node is cordoned first, so nothing the fuzzer
    submits is ever started (fuzzed strings never reach a container)."""
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as c:
        assert c.post("/v1/nodes/local/cordon").status_code == 200
        preview = c.post("/v1/previews", json=runnable_preview({})).json()
        commit = {"preview_id": preview["id"], "digest": preview["digest"]}
        r = c.post("/v1/jobs", json={**commit, "retry_key": str(uuid.uuid4())})
        assert r.status_code == 201, r.text


@pytest.mark.timeout(600)
def test_no_server_errors_and_no_schema_violations(api_server: Servers, tmp_path: Path) -> None:
    _seed(api_server)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.e2e.fuzz_hooks", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            ST, "--config-file", str(HERE / "schemathesis.toml"),
            "run", f"{api_server.url}/schema/openapi.json",
            "--checks", CHECKS,
            "-H", f"Authorization: Bearer {api_server.token}",
            "--phases", "examples,coverage,fuzzing,stateful",
            "--seed", "1",
            "--workers", "1",
            "--request-timeout", "20",
            "--no-color",
            # log following would hold a connection open until the job ends
            "--exclude-path-regex", "/logs$",
            "--report", "junit", "--report-dir", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=540, cwd=ROOT, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert "Stateful" in out and "⏭  Stateful" not in out, out[-3000:]
    log = (api_server.state_dir / "serve-0.log").read_text()
    assert "unhandled error" not in log, log[-4000:]
