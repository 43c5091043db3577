"""`tp node install --systemd` (docs/operations.md#systemd-units): the unit files it writes are
valid for systemd's own checker (`systemd-analyze verify`), run the command the daemon was given
(read back as systemd parses ExecStart=, and accepted by `tp node run` itself), keep the join
token out of the world-readable unit; bad input is refused with nothing written."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from domain.errors import InvalidInput
from entrypoints.cli import node_install
from tests.fixtures.server import TP

pytestmark = [pytest.mark.integration]

NAME = 'n 1%$"x'  # a space, a specifier, an expansion and a quote: each must survive quoting


def tp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TP, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def exec_start(unit: str) -> list[str]:
    """ExecStart= as systemd reads it: C-style quoting, then %% and $$ as single characters."""
    [line] = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    words = shlex.split(line.removeprefix("ExecStart="))
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("the CA file (its content is the daemon's concern)\n")
    return path


def install(tmp_path: Path, ca: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "units").mkdir(exist_ok=True)
    return tp("node", "install", "--systemd", "--server", "gw.example.org:8471", "--ca", str(ca),
              "--unit-dir", str(tmp_path / "units"), *extra)  # fmt: skip


def test_units_are_valid_and_run_the_daemon_and_collector_as_given(
    tmp_path: Path, ca: Path
) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (the Debian package systemd; deploy/dev/setup.sh)"
    state = tmp_path / "state"
    given = ["--state-dir", str(state), "--name", NAME, "--executor", "process", "--cpus", "2"]
    done = install(tmp_path, ca, *given, "--join-token", "tp_join_secret", "--no-enable")
    assert done.returncode == 0, done.stderr
    assert "systemctl daemon-reload && systemctl enable --now" in done.stdout
    node = (tmp_path / "units" / "tuneplane-node.service").read_text()
    collector = (tmp_path / "units" / "tuneplane-collector.service").read_text()
    units = [str(tmp_path / "units" / n) for n in ("tuneplane-node.service",
                                                    "tuneplane-collector.service")]  # fmt: skip
    checked = subprocess.run([analyze, "verify", *units], capture_output=True, text=True)
    assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr

    argv = exec_start(node)
    assert argv == [TP, "node", "run", "--server", "gw.example.org:8471", "--ca", str(ca),
                    "--name", NAME, "--cpus", "2.0", "--executor", "process",
                    "--telemetry-gateway", "gw.example.org:8472", "--state-dir", str(state),
                    "--separate-collector"]  # fmt: skip
    assert exec_start(collector) == [
        TP, "collector", "--spool", f"{state}/collector/spool", "--members",
        f"{state}/collector/members", "--gateway", "gw.example.org:8472", "--ca", str(ca),
    ]  # fmt: skip
    assert "RestartPreventExitStatus=5" in node and "KillMode=process" in node
    assert f"ReadWritePaths={state}/collector" in collector and "ProtectSystem=strict" in collector
    # the one-time token: only in the state directory's 0600 file, never in a unit
    assert "tp_join_secret" not in node + collector
    token = state / "join-token.env"
    assert token.read_text() == "TUNEPLANE_JOIN_TOKEN=tp_join_secret\n"
    assert token.stat().st_mode & 0o777 == 0o600
    assert f"EnvironmentFile=-{token}" in node
    # `tp node run` accepts every option the unit gives it: it gets as far as enrolment
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_no_token())
    assert "not enrolled yet" in ran.stdout + ran.stderr, ran.stdout + ran.stderr


def _no_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TUNEPLANE_JOIN_TOKEN"}


def call(tmp_path: Path, default_ca: Path, **given: object) -> int:
    """The command's function in this process (no interpreter start per case): the same
    checks; its exit codes and output through `tp` are tests/e2e/test_cli_every_command.py's."""
    (tmp_path / "units").mkdir(exist_ok=True)
    options: dict[str, object] = {"systemd": True, "server": "gw.example.org:8471"}
    options.update({"ca": default_ca, "unit_dir": tmp_path / "units"} | given)
    return node_install.install(**options)  # type: ignore[arg-type]


@pytest.mark.skipif(Path("/run/systemd/system").is_dir(), reason="systemd runs here")
def test_without_systemd_the_units_are_written_and_it_exits_6(
    tmp_path: Path, ca: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert call(tmp_path, ca, state_dir=tmp_path / "state") == 6
    assert (tmp_path / "units" / "tuneplane-node.service").is_file()


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"state_dir": Path("relative/state")}, "--state-dir relative/state is relative"),
        ({}, "--state-dir is required with --systemd"),
        ({"state_dir": Path("/var/lib/tp node")}, "holds a character systemd's path lists"),
        ({"state_dir": "{tmp}/s", "name": "n1\nExecStartPre=/bin/evil"}, "control character"),
        ({"state_dir": "{tmp}/s\x00"}, "control character"),
        ({"state_dir": "{tmp}/s", "unit_dir": "{tmp}/missing"}, "is not a directory"),
        ({"state_dir": "{tmp}/s", "unit_dir": "{ca}"}, "is not a directory"),
        ({"state_dir": "{tmp}/s", "shared_dir": "{tmp}/nope"}, "is not a directory"),
        ({"state_dir": "{tmp}/s", "ca": "{tmp}/nope.pem"}, "is not a file"),
        ({"state_dir": "{tmp}/s", "telemetry_gateway": "nope"}, "is not HOST:PORT"),
        ({"state_dir": "{tmp}/s", "systemd": False}, "say how to install: --systemd"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    tmp_path: Path, ca: Path, given: dict[str, object], says: str
) -> None:
    filled = {
        k: Path(v.format(tmp=tmp_path, ca=ca)) if isinstance(v, str) and "{" in v else v
        for k, v in given.items()
    }
    with pytest.raises(InvalidInput) as refused:
        call(tmp_path, ca, **filled)
    assert says in refused.value.message and refused.value.fix, refused.value
    assert not list((tmp_path / "units").iterdir())
    assert not (tmp_path / "s").exists()


def test_a_unit_dir_it_may_not_write_is_refused(tmp_path: Path, ca: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the command as another user")
    # outside pytest's tree, whose 0700 directories the other user could not even pass
    locked = Path(tempfile.mkdtemp(prefix="tp-units-", dir="/var/tmp"))
    os.chmod(locked, 0o755)
    ca = Path(shutil.copy(ca, locked / "ca.pem"))
    os.chmod(ca, 0o644)
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", TP, "node", "install",
           "--systemd", "--server", "gw:8471", "--ca", str(ca), "--state-dir",
           "/var/lib/tp-never-made", "--unit-dir", str(locked)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done
    assert f"--unit-dir {locked} is not writable" in done.stderr, done.stderr
    assert "fix: run as root" in done.stderr
    assert [p.name for p in locked.iterdir()] == ["ca.pem"]
    assert not Path("/var/lib/tp-never-made").exists()
    shutil.rmtree(locked)
