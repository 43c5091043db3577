"""`tp` imports only the command it runs (entrypoints/cli/lazy.py): `tp --help` lists every
command without importing one, a command's own `--help` keeps its full text, and a command
imports nothing of the others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cyclopts import App

from entrypoints.cli.lazy import lazy
from entrypoints.cli.main import COMMANDS, build_app
from tests.support.modules import modules_after

pytestmark = pytest.mark.unit

# what every `tp` process imports: the app, its error rendering and output
ALWAYS = {"entrypoints.cli", "entrypoints.cli.main", "entrypoints.cli.errors",
          "entrypoints.cli.output", "entrypoints.cli.lazy",
          "entrypoints.cli.escape"}  # fmt: skip  # escape: what output and errors show


def cli_modules_after(*argv: str) -> set[str]:
    """The entrypoints.cli modules a fresh `tp ARGV` process has imported when it exits."""
    return {m for m in modules_after(*argv) if m.startswith("entrypoints.cli")}


def test_tp_help_lists_every_command_and_imports_none() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "entrypoints.cli.main", "--help"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, COLUMNS="200"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name, _, summary in COMMANDS:
        assert f" {name} " in done.stdout and summary in done.stdout, name
    assert cli_modules_after("--help") == ALWAYS


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    loaded = cli_modules_after("job", "status", "--help")
    assert "entrypoints.cli.jobs" in loaded
    others = {"fleet", "admin", "server_cmds", "submit", "plugins", "sim", "job_metrics", "nodes"}
    assert not {f"entrypoints.cli.{m}" for m in others} & loaded, loaded


def test_a_client_command_leaves_out_what_it_never_uses(tmp_path: Path) -> None:
    """About half of a client command's start: httpx (the client is on http.client since
    session 50) and with it click and pygments, importlib.metadata (only `tp --version` needs
    it), urllib.request (only with a proxy in the environment), rich's progress bars and tables
    (imported when one is drawn on a terminal)."""
    env = dict(os.environ, TUNEPLANE_CONFIG_DIR=str(tmp_path), TUNEPLANE_TOKEN="")
    loaded = modules_after("job", "status", "job-1", env=env)  # "not logged in"
    assert "entrypoints.cli.client" in loaded and "http.client" in loaded
    unused = {"httpx", "httpcore", "h11", "click", "pygments", "importlib.metadata",
              "urllib.request", "rich.progress", "rich.table"}  # fmt: skip
    assert not unused & loaded, unused & loaded
    version = subprocess.run(
        [sys.executable, "-m", "entrypoints.cli.main", "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert version.returncode == 0 and version.stdout.startswith("tp (TunePlane) 0."), version


def test_each_entry_resolves_to_a_command_of_its_name_with_its_own_full_help() -> None:
    app = build_app()
    for name, target, summary in COMMANDS:
        assert summary.endswith(".") and len(summary) <= 130, name
        resolved = app[name]
        assert isinstance(resolved, App) and resolved.name[0] == name, target
        # the summary is for `tp --help`; the command's own page keeps its own words
        assert resolved.help, name
    # `tp serve --help` says what the summary leaves out
    assert (
        "load balancer" in app["serve"].help
        and "load balancer" not in dict((n, s) for n, _, s in COMMANDS)["serve"]
    )
    # the nested lazy commands resolve as well
    for path in ("job metrics", "fleet check", "admin token", "admin bootstrap", "node install",
                 "runtime build"):  # fmt: skip
        group, command = path.split()
        assert isinstance(app[group][command], App), path
    assert "create" in app["admin"]["token"]


def test_a_name_registered_twice_is_refused() -> None:
    app = App(name="t")
    lazy(app, "job", "jobs:job_app", "Jobs.")
    with pytest.raises(ValueError, match="'job' is registered twice"):
        lazy(app, "job", "jobs:job_app", "Jobs.")
