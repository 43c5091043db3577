"""What the CLI is given by others never acts on its user's terminal or stops it with a
traceback: strings a server sends are shown escaped (a job's file names, a plugin's
description), files nested too deeply are refused naming the file, a server URL with a
password in it is refused without showing it, and a malformed login says so. Over real
sockets, as tests/unit/test_cli_transport.py does."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from entrypoints.cli import errors, output
from entrypoints.cli.escape import escape, escape_lines
from entrypoints.cli.main import run

pytestmark = pytest.mark.unit

EVIL = "\x1b[31mRED\x1b[0m\x1b]0;TITLE\x07"
FORGED = "ok\rFAKE"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")  # none may reach the terminal

ANSWERS: dict[str, tuple[int, str, bytes]] = {}  # path → status, content type, body


class _Server(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        status, ctype, body = ANSWERS.get(
            self.path.partition("?")[0], (404, "application/json", b'{"detail": "no"}')
        )
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cfg"
    monkeypatch.setenv("TUNEPLANE_CONFIG_DIR", str(d))
    for name in ("TUNEPLANE_SERVER", "TUNEPLANE_TOKEN", "TUNEPLANE_SETTINGS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    ANSWERS.clear()
    return d


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serving() as url:
        monkeypatch.setenv("TUNEPLANE_SERVER", url)
        monkeypatch.setenv("TUNEPLANE_TOKEN", "tp_token")
        yield url


def answer(path: str, body: Any, status: int = 200) -> None:
    ANSWERS[path] = (status, "application/json", json.dumps(body).encode())


def on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stdout as a colour terminal: what rich would send to one."""
    buf = io.StringIO()
    console = output._Console(file=buf, force_terminal=True, width=200, color_system="truecolor")
    monkeypatch.setattr(output, "out", console)
    return buf


def assert_inert(text: str) -> None:
    for ch in RAW:
        assert ch not in text, (ch, text)
    assert "\x1b]" not in text and "TITLE\x07" not in text


# --- strings from the server ------------------------------------------------------------------


def test_escape_shows_every_control_character_visibly_and_unambiguously() -> None:
    assert escape(EVIL) == "\\x1b[31mRED\\x1b[0m\\x1b]0;TITLE\\x07"
    assert escape(FORGED) == "ok\\rFAKE"
    assert escape("a\nb\tc\x00\x7f\x85\x9b") == "a\\nb\\tc\\x00\\x7f\\x85\\x9b"
    assert escape("abc\u202edef\u2066") == "abc\\u202edef\\u2066"
    assert escape("C:\\x1b") == "C:\\\\x1b"  # a backslash written is never taken for an escape
    assert escape("naïve ünïcode, 日本") == "naïve ünïcode, 日本" and escape(None) == ""
    assert escape_lines("one\ntwo\x1b[2J") == "one\ntwo\\x1b[2J"  # a console keeps its lines


def artifacts(*paths: str) -> dict[str, Any]:
    files = [{"path": p, "size": 3, "sha256": "ab" * 32} for p in paths]
    return {"members": [{"attempt": 1, "member": 0, "files": files, "size": 6,
                         "digest": "sha256:" + "cd" * 32}]}  # fmt: skip


def test_artifacts_ls_shows_a_jobs_file_names_escaped_on_a_pipe(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer("/v1/jobs/j1/artifacts", artifacts(EVIL, FORGED, "two\nlines"))
    assert run(["artifacts", "ls", "j1"]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert "\\x1b[31mRED\\x1b[0m\\x1b]0;TITLE\\x07" in out and "ok\\rFAKE" in out
    assert "two\\nlines" in out and len(out.splitlines()) == 4  # the header and three rows


def test_artifacts_ls_shows_them_escaped_on_a_terminal(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    buf = on_a_terminal(monkeypatch)
    answer("/v1/jobs/j1/artifacts", artifacts(EVIL, FORGED, "[bold]x[/bold]"))
    assert run(["artifacts", "ls", "j1"]) == 0
    text = buf.getvalue()
    for ch in ("\x07", "\r", "\x1b]"):
        assert ch not in text
    assert "\x1b[31m" not in text  # the job's colour: rich's own styling is all that remains
    assert "x1b[31mRED" in text and "ok\\rFAKE" in text and "[bold]x[/bold]" in text


def test_plugin_info_shows_a_publishers_description_escaped(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer(
        "/v1/plugins/p/1.0.0",
        {"name": "p", "version": "1.0.0", "group": "evaluation", "executes": "host",
         "executes_description": "runs\u202e on the host", "description": EVIL + "\n" + FORGED,
         "capabilities": [{"name": "net", "description": "[red]x\x1b[2J"}], "entry": ["run"],
         "digest": "sha256:00", "size": 1, "files": 1, "published_at": None,
         "published_by": "mallory\r", "disabled": None,
         "manifest": [{"path": "a\x1b[1A", "size": 1, "sha256": "00"}]},
    )  # fmt: skip
    assert run(["plugin", "info", "p@1.0.0"]) == 0
    out = capsys.readouterr().out
    assert_inert(out)
    assert "about      \\x1b[31mRED\\x1b[0m\\x1b]0;TITLE\\x07\\nok\\rFAKE\n" in out
    assert "runs\\u202e on the host" in out and "by mallory\\r" in out and "a\\x1b[1A" in out


def test_a_servers_error_text_is_escaped_too(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer(
        "/v1/jobs/j1",
        {"type": "https://tuneplane.dev/errors/not-found", "detail": "no\x1b[2J job",
         "fix": "run\rerror: forged"},
        status=404,
    )  # fmt: skip
    assert run(["job", "status", "j1"]) == errors.NOT_FOUND
    err = capsys.readouterr().err
    assert_inert(err)
    assert "error: no\\x1b[2J job\nfix: run\\rerror: forged" in err


def test_a_job_status_reason_cannot_forge_a_line(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answer("/v1/jobs/j1", {"id": "j1", "state": "failed", "reason": "x\nstate      succeeded"})
    run(["job", "status", "j1"])
    out = capsys.readouterr().out
    assert "reason     x\\nstate      succeeded" in out
    assert not any(line.startswith("state      succeeded") for line in out.splitlines())


# --- files nested too deeply ------------------------------------------------------------------


def assert_refused_naming(
    code: int, capsys: pytest.CaptureFixture[str], file: Path, exit_code: int = errors.USAGE
) -> None:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    assert code == exit_code, err
    assert str(file) in err and "nested too deeply" in err, err


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "ws"
    (ws / "deep").mkdir(parents=True)
    (ws / "tuneplane.toml").write_text("")
    monkeypatch.chdir(ws)
    return ws


@pytest.mark.parametrize("depth", [100_000, 150])
def test_validate_and_submit_refuse_an_experiment_nested_too_deeply(
    workspace: Path, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    file = workspace / "deep" / "experiment.toml"
    file.write_text('name = "deep"\nmethod = "custom/custom"\nx = ' + "[" * depth + "]" * depth)
    assert_refused_naming(run(["validate", "deep", "--offline"]), capsys, file)
    code = run(["submit", "deep", "--profile", "cpu:1", "--preview"])
    assert_refused_naming(code, capsys, file)


def test_fleet_apply_and_sim_refuse_a_file_nested_too_deeply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "deep.toml"
    file.write_text("pools = " + "[" * 100_000)
    assert_refused_naming(run(["fleet", "apply", str(file)]), capsys, file)
    assert_refused_naming(run(["sim", "--scenario", str(file)]), capsys, file)


@pytest.mark.parametrize("body", ["[" * 100_000, '{"a":' * 150 + "1" + "}" * 150])
def test_credentials_nested_too_deeply_are_a_malformed_file(
    env: Path, capsys: pytest.CaptureFixture[str], body: str
) -> None:
    env.mkdir()
    (env / "credentials.json").write_text(body)
    code = run(["whoami"])
    assert_refused_naming(code, capsys, env / "credentials.json")


def test_a_settings_file_nested_too_deeply_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "settings.toml"
    file.write_text("A = " + "[" * 100_000)
    monkeypatch.setenv("TUNEPLANE_SETTINGS_FILE", str(file))
    with pytest.raises(SystemExit) as stop:  # a bad setting's one line, as every setting's
        run(["whoami"])
    assert str(file) in str(stop.value) and "nested too deeply" in str(stop.value)


def test_a_submission_file_nested_too_deeply_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str
) -> None:
    file = tmp_path / "sub.json"
    file.write_text("[" * 100_000)
    assert_refused_naming(run(["submit", "--commit", str(file)]), capsys, file)


def test_an_answer_nested_too_deeply_is_a_server_error(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ANSWERS["/v1/whoami"] = (200, "application/json", b"[" * 100_000)
    ANSWERS["/v1/jobs/j1"] = (404, "application/json", b"[" * 100_000)
    assert run(["whoami"]) == errors.FAILED
    assert run(["job", "status", "j1"]) == errors.NOT_FOUND
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nested too deeply" in err, err


# --- the login ---------------------------------------------------------------------------------


def test_login_refuses_a_server_url_with_a_password_without_showing_it(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving() as url:
        with_password = url.replace("http://", "http://user:hunter2@")
        code = run(["login", "--server", with_password, "--token", "tp_t"])
    err = capsys.readouterr().err
    assert code == errors.USAGE and "hunter2" not in err and "Traceback" not in err
    assert "user name or password" in err and f"--server {url}" in err
    assert not (env / "credentials.json").exists()


def test_a_server_url_with_a_password_from_the_environment_or_the_file_is_refused(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_SERVER", "http://u:hunter2@127.0.0.1:9")
    monkeypatch.setenv("TUNEPLANE_TOKEN", "tp_t")
    assert run(["whoami"]) == errors.USAGE
    err = capsys.readouterr().err
    assert "hunter2" not in err and "TUNEPLANE_SERVER" in err and "user name or password" in err
    monkeypatch.delenv("TUNEPLANE_SERVER")
    monkeypatch.delenv("TUNEPLANE_TOKEN")
    env.mkdir()
    file = env / "credentials.json"
    file.write_text(json.dumps({"server": "http://u:hunter2@127.0.0.1:9", "token": "tp_t"}))
    assert run(["job", "ls"]) == errors.USAGE
    err = capsys.readouterr().err
    assert "hunter2" not in err and str(file) in err and "tp login" in err


@pytest.mark.parametrize(
    ("stored", "problem"),
    [({"server": "http://127.0.0.1:9", "token": 5}, '"token" is a int'),
     ({"server": ["http://x"], "token": "tp_t"}, '"server" is a list'),
     ({"server": "http://127.0.0.1:9", "token": ""}, "\"token\" is ''")],
)  # fmt: skip
def test_a_malformed_credentials_file_says_so_and_how_to_fix_it(
    env: Path, capsys: pytest.CaptureFixture[str], stored: dict[str, Any], problem: str
) -> None:
    env.mkdir()
    file = env / "credentials.json"
    file.write_text(json.dumps(stored))
    assert run(["whoami"]) == errors.USAGE
    err = capsys.readouterr().err
    assert f"the credentials file {file} is malformed: its {problem}" in err, err
    assert "fix: run `tp login --server URL --token T` again" in err


def test_a_token_with_a_control_character_is_refused_naming_where_it_came_from(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.mkdir()
    file = env / "credentials.json"
    file.write_text(json.dumps({"server": "http://127.0.0.1:9", "token": "tp_se\x00cret"}))
    assert run(["whoami"]) == errors.USAGE
    err = capsys.readouterr().err
    assert f"the token ({file}) holds a control character (U+0000) at position 6" in err, err
    assert "secret" not in err.replace(str(file), "")
    monkeypatch.setenv("TUNEPLANE_SERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("TUNEPLANE_TOKEN", "tp_t\n")
    assert run(["whoami"]) == errors.USAGE
    assert "the token (TUNEPLANE_TOKEN) holds a control character (U+000A)" in (
        capsys.readouterr().err
    )
    assert run(["login", "--server", "http://127.0.0.1:9", "--token", "tp\x1bx"]) == errors.USAGE
    assert "the token (--token) holds a control character (U+001B)" in capsys.readouterr().err


def test_another_web_server_is_named_with_the_fix(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head></html>"
    ANSWERS["/v1/whoami"] = (404, "text/html", page)
    assert run(["whoami"]) == errors.NOT_FOUND
    err = capsys.readouterr().err
    assert f"error: the server at {server} answered HTTP 404 with a page that is not a" in err
    assert "(Welcome to nginx!)" in err and "fix: check that `tp login --server`" in err


def test_a_console_never_passes_a_control_character_through() -> None:
    buf = io.StringIO()
    console = output._Console(file=buf, force_terminal=True, highlight=False)
    console.print(f"job x: {EVIL}\nnext line", markup=False)
    assert_inert(buf.getvalue())
    assert "next line" in buf.getvalue()
    plain = Console(file=io.StringIO(), force_terminal=True, highlight=False)
    plain.print(EVIL, markup=False)  # rich alone passes ESC through
    assert "\x1b]0;TITLE" in plain.file.getvalue()  # type: ignore[attr-defined]
