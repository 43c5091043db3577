"""`tp admin …` against a tiny stub HTTP server started in the test (http.server in a thread).

The stub answers what each test sets in ``stub.answers[(METHOD, path)]`` (a status and a JSON
body, following docs/http-api.md) and records every request, so a test checks both what the
CLI sends and what it prints. The real server is exercised by tests/unit/test_api_admin.py
(in-process) and tests/e2e. ``tests.unit.test_cli_fleet`` and ``test_cli_queues`` reuse it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from entrypoints.cli import errors
from entrypoints.cli.main import run

pytestmark = pytest.mark.unit
TOKEN = "tp_admin_token"


@dataclass
class Stub:
    url: str = ""
    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    def body(self, method: str, path: str) -> Any:
        return next(b for m, p, b in reversed(self.seen) if (m, p) == (method, path))


def problem(status: int, code: str, detail: str, fix: str = "", fld: str | None = None) -> Any:
    return status, {"type": f"https://tuneplane.dev/errors/{code}", "title": code,
                    "status": status, "detail": detail, "fix": fix, "field": fld}  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    stub: Stub

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, method: str) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(*problem(401, "unauthenticated", "unknown token", "tp login"))
        path = url.path + (f"?{url.query}" if url.query else "")
        self.stub.seen.append((method, path, json.loads(raw) if raw else None))
        found = self.stub.answers.get((method, path))
        if found is None:
            found = problem(404, "not-found", f"nothing at {method} {path}", "check the path")
        return self._send(*found)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        ctype = "application/problem+json" if status >= 400 else "application/json"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_PATCH(self) -> None:
        self._answer("PATCH")


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    state = Stub()
    handler = type("Handler", (_Handler,), {"stub": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("TUNEPLANE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("TUNEPLANE_SERVER", state.url)
    monkeypatch.setenv("TUNEPLANE_TOKEN", TOKEN)
    yield state
    server.shutdown()
    server.server_close()


CAROL = {"name": "carol", "role": "member", "teams": ["research"], "disabled": False,
         "created_at": "2026-01-01T00:00:00Z"}  # fmt: skip


def test_user_add_ls_and_set(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.answers[("POST", "/v1/users")] = (201, CAROL)
    assert run(["admin", "user", "add", "carol", "--team", "research"]) == 0
    assert stub.body("POST", "/v1/users") == {"name": "carol", "role": "member",
                                              "teams": ["research"]}  # fmt: skip
    captured = capsys.readouterr()
    assert "created user carol: member, teams research" in captured.out
    assert "tp admin token create carol" in captured.err

    assert run(["admin", "user", "add", "dave", "--role", "boss"]) == errors.USAGE
    assert "use one of: admin, operator, member, viewer" in capsys.readouterr().err

    stub.answers[("GET", "/v1/users")] = (200, [CAROL])
    assert run(["admin", "user", "ls"]) == 0
    out = capsys.readouterr().out
    assert "carol" in out and "research" in out and "2026-01-01 00:00:00" in out
    assert run(["admin", "user", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [CAROL]

    disabled = {**CAROL, "disabled": True, "teams": ["eval", "research"]}
    stub.answers[("PATCH", "/v1/users/carol")] = (200, disabled)
    assert run(["admin", "user", "set", "carol", "--add-team", "eval", "--disable"]) == 0
    assert stub.body("PATCH", "/v1/users/carol") == {
        "add_teams": ["eval"], "remove_teams": [], "disabled": True,
    }  # fmt: skip
    assert "(disabled)" in capsys.readouterr().out
    assert run(["admin", "user", "set", "carol", "--no-teams", "--role", "viewer"]) == 0
    assert stub.body("PATCH", "/v1/users/carol") == {
        "add_teams": [], "remove_teams": [], "role": "viewer", "teams": [],
    }  # fmt: skip
    assert run(["admin", "user", "set", "carol", "--enable", "--disable"]) == errors.USAGE
    assert "contradict" in capsys.readouterr().err


def test_token_create_prints_the_token_alone_on_stdout(
    stub: Stub, capsys: pytest.CaptureFixture[str]
) -> None:
    made = {"user": "carol", "token": "tp_x", "id": "tok-1", "label": "", "expires_at": None}
    stub.answers[("POST", "/v1/users/carol/tokens")] = (201, made)
    assert run(["admin", "token", "create", "carol"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "tp_x\n"
    assert "shown once" in captured.err and "tp login --server" in captured.err
    assert "token tok-1 for carol (expires: never)" in captured.err
    stub.answers[("POST", "/v1/users/nobody/tokens")] = problem(
        404, "not-found", "no user nobody", "create the user first: `tp admin user add nobody`",
        "user",
    )  # fmt: skip
    assert run(["admin", "token", "create", "nobody"]) == errors.NOT_FOUND
    err = capsys.readouterr().err
    assert "error: no user nobody" in err and "fix: create the user first" in err
    stub.answers[("POST", "/v1/users/alice/tokens")] = problem(
        403, "forbidden", "user carol has role member, which may not create tokens for other "
        "users", "ask an admin",
    )  # fmt: skip
    assert run(["admin", "token", "create", "alice"]) == errors.AUTH


def test_teams_and_operator_decisions(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:
    stub.answers[("POST", "/v1/teams")] = (201, {"name": "research"})
    assert run(["admin", "team", "add", "research"]) == 0
    assert stub.body("POST", "/v1/teams") == {"name": "research"}
    stub.answers[("GET", "/v1/teams")] = (200, [{"name": "default"}, {"name": "research"}])
    assert run(["admin", "team", "ls"]) == 0
    assert "research" in capsys.readouterr().out
    stub.answers[("POST", "/v1/nodes/a-3/lost")] = (200, {"node": "a-3", "members_failed": 2})
    assert run(["admin", "node", "lost", "a-3", "--reason", "powered off"]) == 0
    assert stub.body("POST", "/v1/nodes/a-3/lost") == {"reason": "powered off"}
    assert "2 member(s) recorded failed" in capsys.readouterr().out
    assert run(["admin", "node", "lost", "a-3"]) == errors.USAGE  # --reason is required
    stub.answers[("POST", "/v1/attempts/att-1/release")] = (
        200, {"attempt_id": "att-1", "released": True},
    )  # fmt: skip
    assert run(["admin", "reservation", "release", "att-1", "--reason", "gone"]) == 0
    assert "attempt att-1: released" in capsys.readouterr().out
