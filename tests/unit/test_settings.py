"""The typed settings (issue 21, item 1): one loader, every bad value refused at start naming
the variable, the value and the fix; the settings file under the environment; `tp config show`
(the real CLI, in a subprocess); the generated docs table in step with the model."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from domain.errors import InvalidInput
from entrypoints import settings_doc
from entrypoints.settings import Settings
from entrypoints.settings_loader import load
from entrypoints.settings_sections import NodeSettings, PostgresSettings, SlurmSettings
from tests.fixtures.server import TP

pytestmark = pytest.mark.unit


def test_the_docs_table_is_the_model() -> None:
    assert settings_doc.main(["--check"]) == 0, "run: python -m entrypoints.settings_doc --write"
    doc = settings_doc.DOC.read_text()
    assert "`TUNEPLANE_PG_PORT`" in doc and "`TUNEPLANE_HTTP_PORT` | `8470`" in doc


def test_a_stale_docs_table_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "operations.md"
    stale.write_text(settings_doc.DOC.read_text().replace("| `8470` |", "| `8080` |"))
    monkeypatch.setattr(settings_doc, "DOC", stale)
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.main(["--write"]) == 0 and settings_doc.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("TUNEPLANE_HTTP_PORT", "eighty", "is not a whole number from 1 to 65535"),
        ("TUNEPLANE_HTTP_PORT", "-1", "is not a whole number from 1 to 65535"),
        ("TUNEPLANE_NODE_GATEWAY_PORT", "0", "is not a whole number from 1 to 65535"),
        ("TUNEPLANE_TELEMETRY_GATEWAY_PORT", "65536", "is not a whole number from 1 to 65535"),
        ("TUNEPLANE_HEARTBEAT_SECONDS", "1.5", "is not a whole number of at least 1"),
        ("TUNEPLANE_NODE_SESSION_FLOOR_SECONDS", "0", "is not a whole number of at least 1"),
        ("TUNEPLANE_NODE_SESSION_FLOOR_SECONDS", "ten", "is not a whole number of at least 1"),
        ("TUNEPLANE_BLOB_GC_SECONDS", "-5", "is not a whole number of at least 0"),
        ("TUNEPLANE_LOG_LEVEL", "loud", "is not one of critical, error, warning"),
        ("TUNEPLANE_GATEWAY_CERT", "/nonexistent/cert.pem", "does not exist"),
        ("TUNEPLANE_PG_BIN", "/nonexistent/bin", "does not exist"),
        ("TUNEPLANE_PG_PORT", "65536", "is not a whole number from 1 to 65535"),
        ("TUNEPLANE_SIGNALS", "yes", "is neither on nor off"),
        ("TUNEPLANE_NODE_GATEWAY_SHARE_PORT", "on", "is not true or false"),
        ("TUNEPLANE_WEBHOOK_PRIVATE", "deny", "is neither allow nor refuse"),
        ("TUNEPLANE_RENDEZVOUS_PORTS", "29500", "is not a range of ports"),
        ("TUNEPLANE_RENDEZVOUS_PORTS", "-1-5", "is not a range of ports"),
        ("TUNEPLANE_RENDEZVOUS_PORTS", "30000-29999", "is out of bounds"),
        ("TUNEPLANE_RENDEZVOUS_PORTS", "80-90", "is out of bounds"),
    ],
)
def test_a_bad_value_stops_the_start_naming_variable_value_and_fix(
    name: str, value: str, complaint: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        Settings.from_env({name: value})
    text = str(stopped.value)
    assert text.startswith(f"error: {name}={value!r} {complaint}"), text
    assert "(fix: " in text


def test_a_silent_node_session_is_dead_after_six_heartbeats_or_the_floor() -> None:
    """The default is the limit of before the floor was a setting: max(6 heartbeats, 30 s)."""
    default = Settings.from_env({})
    assert default.node_session_timeout == timedelta(seconds=30)
    assert Settings.from_env({"TUNEPLANE_HEARTBEAT_SECONDS": "10"}).node_session_timeout == (
        timedelta(seconds=60)
    )
    floor = {"TUNEPLANE_HEARTBEAT_SECONDS": "1", "TUNEPLANE_NODE_SESSION_FLOOR_SECONDS": "10"}
    assert Settings.from_env(floor).node_session_timeout == timedelta(seconds=10)
    short = {"TUNEPLANE_HEARTBEAT_SECONDS": "5", "TUNEPLANE_NODE_SESSION_FLOOR_SECONDS": "1"}
    assert Settings.from_env(short).node_session_timeout == timedelta(seconds=30)
    with pytest.raises(SystemExit, match="fix: set TUNEPLANE_NODE_SESSION_FLOOR_SECONDS to whole"):
        Settings.from_env({"TUNEPLANE_NODE_SESSION_FLOOR_SECONDS": "-3"})


@pytest.mark.parametrize(
    ("text", "seconds"), [("", 5.0), ("1", 1.0), ("0.1", 0.1), ("0", None), ("x", None)]
)
def test_the_collectors_longest_pause_between_sends(text: str, seconds: float | None) -> None:
    env = {"TUNEPLANE_COLLECTOR_RETRY_MAX_SECONDS": text}
    if seconds is None:
        with pytest.raises(InvalidInput, match="set TUNEPLANE_COLLECTOR_RETRY_MAX_SECONDS to e"):
            load(NodeSettings, env)
    else:
        assert load(NodeSettings, env).collector_retry_max_seconds == seconds


def test_a_nul_byte_is_refused_wherever_it_comes_from() -> None:
    # the environment cannot hold one (execve refuses it); a mapping or the file can
    for name in ("TUNEPLANE_HTTP_HOST", "TUNEPLANE_HTTP_PORT", "TUNEPLANE_STATE_DIR"):
        with pytest.raises(SystemExit, match=f"{name} holds a NUL byte"):
            Settings.from_env({name: "a\0b"})


def test_blank_is_unset_and_explicit_fields_are_known() -> None:
    settings = Settings.from_env({"TUNEPLANE_HTTP_PORT": "", "TUNEPLANE_HTTP_HOST": "  "})
    assert (settings.port, settings.host, settings.explicit) == (8470, "127.0.0.1", frozenset())
    settings = Settings.from_env({"TUNEPLANE_DEFAULT_BACKEND": "local", "TUNEPLANE_PG_PORT": "55"})
    assert settings.explicit == {"default_backend", "postgres.port"}
    assert settings.postgres == PostgresSettings(port=55)
    assert (
        load(NodeSettings, {"TUNEPLANE_NODE_RETRY_MAX_SECONDS": " 0.5 "}).retry_max_seconds == 0.5
    )
    assert load(SlurmSettings, {"TUNEPLANE_SLURM_ACCOUNTING": "yes"}).accounting is True
    ports = Settings.from_env({"TUNEPLANE_RENDEZVOUS_PORTS": " 30000-30000 "}).rendezvous_ports
    assert list(ports) == [30000]


def test_the_file_is_under_the_environment(tmp_path: Path) -> None:
    file = tmp_path / "tuneplane.toml"
    file.write_text('TUNEPLANE_HTTP_PORT = 9001\nTUNEPLANE_HTTP_HOST = "0.0.0.0"\n')
    env = {"TUNEPLANE_SETTINGS_FILE": str(file), "TUNEPLANE_HTTP_HOST": "127.0.0.2"}
    settings = Settings.from_env(env)
    assert (settings.port, settings.host) == (9001, "127.0.0.2")
    file.write_text("TUNEPLANE_HTTP_PORT = 0\n")
    with pytest.raises(SystemExit, match="TUNEPLANE_HTTP_PORT='0' is not a whole number"):
        Settings.from_env(env)
    file.write_text("TUNEPLANE_HTP_PORT = 1\n")
    with pytest.raises(SystemExit, match="unknown settings: TUNEPLANE_HTP_PORT"):
        Settings.from_env(env)
    file.write_text("TUNEPLANE_HTTP_PORT = [1]\n")
    with pytest.raises(SystemExit, match="TUNEPLANE_HTTP_PORT is a list, not a text"):
        Settings.from_env(env)
    file.write_text("not toml =\n")
    with pytest.raises(SystemExit, match="is not TOML"):
        Settings.from_env(env)
    with pytest.raises(SystemExit, match="cannot be read"):
        Settings.from_env({"TUNEPLANE_SETTINGS_FILE": str(tmp_path / "missing.toml")})


def _tp(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    full = {**keep, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), **env}
    return subprocess.run([TP, "config", "show", *args], env=full, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_config_show_for_real(tmp_path: Path) -> None:
    file = tmp_path / "s.toml"
    file.write_text("TUNEPLANE_NODE_GATEWAY_PORT = 9471\n")
    env = {
        "TUNEPLANE_SETTINGS_FILE": str(file),
        "TUNEPLANE_DATABASE_URL": "postgresql://tp:hunter2@db.example:5432/tp",
        "TUNEPLANE_SLURM_TOKEN": "jwt-secret",
        "TUNEPLANE_HTTP_PORT": "9470",
    }
    shown = _tp(["--json"], env, tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = {r["variable"]: r for r in json.loads(shown.stdout)}
    assert rows["TUNEPLANE_HTTP_PORT"] == {
        "section": "api", "variable": "TUNEPLANE_HTTP_PORT", "value": "9470", "source": "env"
    }  # fmt: skip
    assert (rows["TUNEPLANE_NODE_GATEWAY_PORT"]["value"], rows["TUNEPLANE_NODE_GATEWAY_PORT"][
        "source"]) == ("9471", "file")  # fmt: skip
    assert rows["TUNEPLANE_TELEMETRY_GATEWAY_PORT"]["source"] == "default"
    assert rows["TUNEPLANE_DATABASE_URL"]["value"] == "postgresql://tp:****@db.example:5432/tp"
    assert rows["TUNEPLANE_SLURM_TOKEN"]["value"] == "****"
    assert "hunter2" not in shown.stdout and "jwt-secret" not in shown.stdout
    node = _tp(["--process", "node"], env, tmp_path)
    assert node.returncode == 0 and "TUNEPLANE_NODE_RETRY_MAX_SECONDS" in node.stdout
    assert "TUNEPLANE_HTTP_PORT" not in node.stdout  # the node daemon does not read it
    unknown = _tp(["--process", "scheduler"], env, tmp_path)
    assert unknown.returncode == 2 and "telemetry-gateway" in unknown.stdout + unknown.stderr
    bad = _tp([], {**env, "TUNEPLANE_HTTP_PORT": "0"}, tmp_path)
    assert bad.returncode == 1 and "TUNEPLANE_HTTP_PORT='0'" in bad.stderr
    assert "Traceback" not in bad.stderr + unknown.stderr + unknown.stdout


@pytest.mark.parametrize(
    ("path", "banned"),
    [
        ("adapters/docker/engine.py", True),
        ("entrypoints/server.py", True),
        ("application/example.py", True),
        ("entrypoints/settings_loader.py", False),
        ("adapters/child_env.py", False),
        ("adapters/recipes/trl/sft/train.py", False),  # workload code: its contract variables
        ("adapters/sdk/tuneplane_sdk/__init__.py", False),
    ],
)
def test_only_the_settings_model_reads_the_environment(path: str, banned: bool) -> None:
    """The ruff rule (TID251) that keeps settings in the one model, where it applies."""
    ruff = Path(TP).parent / "ruff"
    root = Path(__file__).resolve().parents[2]
    code = "import os\n\nX = os.environ.get('TUNEPLANE_X')\nY = os.getenv('Y')\n"
    checked = subprocess.run(
        [str(ruff), "check", "--select", "TID251", "--stdin-filename", path, "-"],
        input=code, capture_output=True, text=True, cwd=root, timeout=60,
    )  # fmt: skip
    assert (checked.returncode != 0) is banned, checked.stdout
    if banned and path.startswith(("domain/", "application/")):  # no os there at all
        assert "`os` is banned" in checked.stdout  # (domain/ruff.toml)
    elif banned:
        assert "`os.environ` is banned" in checked.stdout and "`os.getenv`" in checked.stdout
