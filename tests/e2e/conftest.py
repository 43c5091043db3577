"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_walkthrough import Cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def cli(api_server, tmp_path: Path) -> Cli:  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    c = Cli(tmp_path, tmp_path)
    c("login", "--server", api_server.url, "--token", api_server.token)
    c("init", str(ws))
    c.cwd = ws
    return c


@pytest.fixture(scope="session")
def numpy_runtime(docker_host: str) -> None:
    """The example's runtime image, built as the README says (cached between runs by its
    recipe)."""
    build = ROOT / "deploy/images/build.sh"
    proc = subprocess.run(
        ["bash", str(build), "python-numpy", "--docker-host", docker_host],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
