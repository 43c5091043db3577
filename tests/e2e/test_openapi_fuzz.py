"""Schemathesis against the served OpenAPI document: generated (valid and invalid) requests to
every operation of a real server must never produce a 5xx, and every answer must match the
schema and content type the document declares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ST = str(Path(sys.executable).parent / "schemathesis")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "response_schema_conformance",
        "content_type_conformance",
        "status_code_conformance",
    ]
)


def test_no_server_errors_and_no_schema_violations(api_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        [
            ST, "run", f"{api_server.url}/schema/openapi.json",
            "--checks", CHECKS,
            "-H", f"Authorization: Bearer {api_server.token}",
            "--max-examples", "25",
            "--seed", "1",
            "--phases", "examples,coverage,fuzzing",
            "--workers", "2",
            "--request-timeout", "20",
            # log following would hold a connection open until the job ends
            "--exclude-path-regex", "/logs$",
            "--report", "junit", "--report-dir", str(tmp_path),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
