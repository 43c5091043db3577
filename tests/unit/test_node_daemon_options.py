"""`tp node run` refuses, before it connects, what would make every stream fail: a bad
reconnect pause or Welcome timeout, or an advertised address the gateway refuses (spaces,
control characters)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import pytest

from adapters.tls import ensure_dev_pki
from domain.errors import InvalidInput
from entrypoints.node_daemon import (
    CONNECT_TIMEOUT_ENV,
    RETRY_MAX_ENV,
    DaemonOptions,
    connect_timeout,
    retry_max,
    run_daemon,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [("", 10.0), ("0.5", 0.5), (" 600 ", 600.0)])
def test_the_reconnect_pause_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, seconds: float
) -> None:
    monkeypatch.setenv(RETRY_MAX_ENV, text)
    assert retry_max() == seconds


@pytest.mark.parametrize("text", ["0", "-1", "601", "nan", "inf", "ten", "1e9"])
def test_a_bad_reconnect_pause_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(RETRY_MAX_ENV, text)
    with pytest.raises(InvalidInput, match=RETRY_MAX_ENV):
        retry_max()


@pytest.mark.parametrize(("text", "seconds"), [("", 30.0), ("4", 4.0), (" 600 ", 600.0)])
def test_the_welcome_timeout_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, seconds: float
) -> None:
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, text)
    assert connect_timeout() == seconds


@pytest.mark.parametrize("text", ["0", "0.5", "601", "nan", "inf", "thirty"])
def test_a_bad_welcome_timeout_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, text)
    with pytest.raises(InvalidInput, match=CONNECT_TIMEOUT_ENV) as refused:
        connect_timeout()
    assert refused.value.fix == f"set {CONNECT_TIMEOUT_ENV} to e.g. 30, or unset it"


@pytest.mark.parametrize("address", ["a b", "10.0.0.1\x00", "x" * 300])
def test_an_address_the_gateway_would_refuse_stops_the_daemon_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str
) -> None:
    ca = ensure_dev_pki(tmp_path, ["localhost"]).ca.cert
    options = DaemonOptions(
        server="127.0.0.1:1", ca=ca, state_dir=tmp_path / "node", advertise_address=address
    )
    assert run_daemon(options) == 1
    out = capsys.readouterr().out
    assert "advertised address" in out and "fix: start the daemon with --advertise-address" in out


class ExecutorOptions(TypedDict, total=False):
    """The DaemonOptions fields the bad-executor cases set."""

    executor: str
    runtime_dirs: tuple[str, ...]
    member_user: str


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"executor": "vm"}, "--executor 'vm' is not an executor"),
        ({"runtime_dirs": ("torch=/opt/torch/bin",)}, "only applies to host processes"),
        ({"executor": "process", "runtime_dirs": ("torch",)}, "is not RUNTIME=DIRECTORY"),
        ({"executor": "process", "runtime_dirs": ("t=rel/bin",)}, "not an absolute directory"),
        ({"executor": "process", "runtime_dirs": ("t=/a:/b",)}, "not an absolute directory"),
        ({"executor": "process", "member_user": "root"}, "is root: members would read"),
        # a member's /tmp is its own: a runtime there would leave python3 to the rest of PATH
        ({"executor": "process", "runtime_dirs": ("t=/tmp/envs/t/bin",)}, "members get a private"),
        ({"executor": "process", "runtime_dirs": ("t=/tmp",)}, "under /tmp: members get"),
    ],
)
def test_a_bad_executor_setting_stops_the_daemon_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: ExecutorOptions, said: str
) -> None:
    ca = ensure_dev_pki(tmp_path, ["localhost"]).ca.cert
    options = DaemonOptions(
        server="127.0.0.1:1", ca=ca, state_dir=tmp_path / "node", join_token="x", **given
    )
    assert run_daemon(options) == 1
    out = capsys.readouterr().out
    assert said in out and "fix:" in out, out
    assert not (tmp_path / "node" / "processes").exists()


def test_a_bad_executor_in_the_environment_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_NODE_EXECUTOR", "proccess")
    ca = ensure_dev_pki(tmp_path, ["localhost"]).ca.cert
    options = DaemonOptions(server="127.0.0.1:1", ca=ca, state_dir=tmp_path / "n", join_token="x")
    assert run_daemon(options) == 1
    assert "TUNEPLANE_NODE_EXECUTOR='proccess' is not an executor" in capsys.readouterr().out


def test_a_runtime_inside_the_node_state_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = ensure_dev_pki(tmp_path, ["localhost"]).ca.cert
    state = tmp_path / "node"
    options = DaemonOptions(
        server="127.0.0.1:1", ca=ca, state_dir=state, join_token="x", executor="process",
        runtime_dirs=(f"torch={state}/envs/torch/bin",),
    )  # fmt: skip
    assert run_daemon(options) == 1
    out = capsys.readouterr().out
    assert "the node's state directory, which members never see" in out and "fix:" in out, out
