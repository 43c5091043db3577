"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_walkthrough import Cli


@pytest.fixture
async def cli(api_server, tmp_path: Path) -> Cli:  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    c = Cli(tmp_path, tmp_path)
    c("login", "--server", api_server.url, "--token", api_server.token)
    c("init", str(ws))
    c.cwd = ws
    return c
