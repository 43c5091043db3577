"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.e2e.test_up import Up
from tests.e2e.test_walkthrough import Cli
from tests.fixtures.server import Servers


@pytest.fixture
async def cli(api_server: Servers, tmp_path: Path) -> Cli:
    ws = tmp_path / "ws"
    c = Cli(tmp_path, tmp_path)
    c("login", "--server", api_server.url, "--token", api_server.token)
    c("init", str(ws))
    c.cwd = ws
    return c


@pytest.fixture
def up(tmp_path: Path, docker_host: str) -> object:
    """`tp up` (tests/e2e/test_up.py's ``Up``) with a state directory of its own, stopped and
    removed after. Not under tmp_path: as root, the embedded PostgreSQL runs as user postgres,
    who needs search permission on every parent, and each pytest session that starts (an xdist
    worker, another run on the machine) takes it back from /tmp/pytest-of-root."""
    u = Up(tmp_path, docker_host)
    u.state = Path(tempfile.mkdtemp(prefix="tuneplane-test-up-")) / "state"
    yield u
    u.stop()
    shutil.rmtree(u.state.parent, ignore_errors=True)
