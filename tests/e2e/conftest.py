"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_up import Up
from tests.e2e.test_walkthrough import Cli


@pytest.fixture
async def cli(api_server, tmp_path: Path) -> Cli:  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    c = Cli(tmp_path, tmp_path)
    c("login", "--server", api_server.url, "--token", api_server.token)
    c("init", str(ws))
    c.cwd = ws
    return c


@pytest.fixture
def up(tmp_path: Path, docker_host: str) -> object:
    """`tp up` in a state directory of the test's (tests/e2e/test_up.py's ``Up``); stopped after."""
    u = Up(tmp_path, docker_host)
    yield u
    u.stop()
