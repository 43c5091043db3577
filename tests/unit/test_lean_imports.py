"""Each gateway process imports what it serves with, not what the other one needs: the
telemetry gateway (asyncpg only) no SQLAlchemy, the node gateway no numpy. Each was a third
or a tenth of a start-up that tests and `tp up` pay many times (docs/testing.md, session 50)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support.modules import modules_after

pytestmark = pytest.mark.unit


def gateway_modules(which: str, tmp_path: Path) -> set[str]:
    """The modules `tp gateway WHICH` has loaded when it stops at an unreachable database,
    the first thing it checks once its container's modules are in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env["TUNEPLANE_DATABASE_URL"] = "postgresql://tp:secret@127.0.0.1:1/tuneplane"
    env["TUNEPLANE_STATE_DIR"] = str(tmp_path / "state")
    with socket.socket() as s:  # a port nothing listens on, so the start gets that far
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return modules_after("gateway", which, "--port", str(port), env=env)


def test_the_telemetry_gateway_imports_no_sqlalchemy(tmp_path: Path) -> None:
    loaded = gateway_modules("telemetry", tmp_path)
    assert "entrypoints.containers.telemetry_gateway" in loaded  # it got past its imports
    assert not {m for m in loaded if m.split(".")[0] in ("sqlalchemy", "alembic")}


def test_the_node_gateway_imports_no_numpy(tmp_path: Path) -> None:
    loaded = gateway_modules("node", tmp_path)
    assert "entrypoints.containers.node_gateway" in loaded
    assert "sqlalchemy" in loaded  # its unit of work
    assert not {m for m in loaded if m.split(".")[0] == "numpy"}
