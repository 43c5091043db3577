"""CLI commands against a tiny stub HTTP server started in the test (http.server in a thread).

The stub follows docs/http-api.md closely enough for the client side: bearer auth,
problem+json errors, archives, previews, idempotent commits keyed by retry key, jobs whose
state advances on each read, a log stream. It is NOT the real server: end-to-end tests against
the real one live in tests/e2e. Fault injection: ``stub.fail[(METHOD, path)]`` is a list of
statuses to answer first, or "drop" (do the work, then close the socket without answering).
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from entrypoints.cli import client, errors, jobs
from entrypoints.cli.main import run

pytestmark = pytest.mark.unit
TOKEN = "tp_test_token"
METHOD = {
    "name": "custom/custom",
    "description": "run a shell command",
    "default_runtime": "busybox",
    "params": [{"name": "command", "type": "str", "help": "shell command", "required": True,
                "default": None, "choices": [], "minimum": None, "maximum": None}],
}  # fmt: skip


@dataclass
class Stub:
    url: str = ""
    seen: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    archives: dict[str, bytes] = field(default_factory=dict)
    previews: dict[str, dict[str, Any]] = field(default_factory=dict)
    commits: dict[str, tuple[str, str]] = field(default_factory=dict)  # retry key → (preview, job)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: list[str] = field(default_factory=lambda: ["pending", "running", "succeeded"])
    logs: list[bytes] = field(default_factory=lambda: [b"step 1\n", b"step 2\n"])

    def bodies(self, method: str, path: str) -> list[dict[str, Any]]:
        return [b for m, p, b in self.seen if (m, p) == (method, path)]


def _problem(status: int, code: str, detail: str, fix: str = "", fld: str | None = None) -> Any:
    return status, {"type": f"https://tuneplane.dev/errors/{code}", "title": code,
                    "status": status, "detail": detail, "fix": fix, "field": fld}  # fmt: skip


def _job(stub: Stub, job_id: str, preview: dict[str, Any]) -> dict[str, Any]:
    spec = preview["spec"]
    return {"id": job_id, "state": "pending", "owner": "alice", "experiment": spec["experiment"],
            "method": spec["method"], "profile": spec["roles"][0]["profile"],
            "queue": spec["queue"], "backend": "local",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "reason": "", "exit_code": None, "spec": spec, "attempts": [],
            "_states": list(stub.states)}  # fmt: skip


def _route(stub: Stub, method: str, path: str, q: dict[str, list[str]], body: Any) -> Any:
    if (method, path) == ("GET", "/v1/whoami"):
        return 200, {"name": "alice", "role": "admin"}
    if (method, path) == ("GET", "/v1/methods"):
        return 200, [METHOD]
    if method == "GET" and path.startswith("/v1/methods/"):
        if path == "/v1/methods/custom/custom":
            return 200, METHOD
        return _problem(404, "not-found", "no such method", "see `tp methods`")
    if (method, path) == ("GET", "/v1/profiles"):
        return 200, [{"name": "cpu:1", "backend": "local", "cpus": 1, "memory_mb": 512,
                      "gpus": 0, "gpu_model": None}]  # fmt: skip
    if (method, path) == ("GET", "/v1/runtimes"):
        return 200, [{"name": "busybox", "image": "busybox:1", "python": None,
                      "process_model": "single-process", "description": "tiny"}]  # fmt: skip
    if (method, path) == ("POST", "/v1/previews"):
        if body["profiles"] != ["cpu:1"]:
            return _problem(422, "invalid-input", f"unknown profile {body['profiles'][0]!r}",
                            "use one of: cpu:1", "intent.profiles[0]")  # fmt: skip
        assert body["source"]["digest"] in stub.archives
        pid = f"pv-{len(stub.previews) + 1}"
        params = {"command": "sh train.sh", **body["params"]}
        spec = {"experiment": body["experiment"], "method": body["method"], "params": params,
                "command": ["/bin/sh", "-c", params["command"]], "backend": "local",
                "runtime": {"name": body["runtime"] or "busybox", "image": "busybox:1",
                            "digest": "sha256:" + "a" * 64, "python": None,
                            "process_model": "single-process"},
                "queue": body.get("queue") or "default", "source": body["source"],
                "env": body["env"],
                "roles": [{"name": "main", "profile": "cpu:1", "pool": "local", "members": 1,
                           "resources": {"cpus": 1, "memory_mb": 512, "gpus": 0,
                                         "gpu_model": None}}]}  # fmt: skip
        stub.previews[pid] = {"id": pid, "digest": f"sha256:{pid}", "owner": "alice",
                              "created_at": "2026-01-01T00:00:00+00:00",
                              "expires_at": "2999-01-01T00:00:00+00:00", "intent": body,
                              "spec": spec}  # fmt: skip
        return 201, stub.previews[pid]
    if (method, path) == ("POST", "/v1/jobs"):
        preview = stub.previews.get(body["preview_id"])
        if preview is None:
            return _problem(404, "not-found", "no such preview", "preview again")
        if body["digest"] != preview["digest"]:
            return _problem(409, "conflict", "digest mismatch", "preview again", "digest")
        if body["retry_key"] in stub.commits:
            pid, job_id = stub.commits[body["retry_key"]]
            if pid != preview["id"]:
                return _problem(422, "retry-key-reused", "retry key reused", "new key")
            return 200, {"job_id": job_id, "preview_id": pid, "retry_key": body["retry_key"],
                         "created": False, "job": stub.jobs[job_id]}  # fmt: skip
        job_id = f"job-{len(stub.jobs) + 1}"
        stub.jobs[job_id] = _job(stub, job_id, preview)
        stub.commits[body["retry_key"]] = (preview["id"], job_id)
        return 201, {
            "job_id": job_id,
            "preview_id": preview["id"],
            "retry_key": body["retry_key"],
            "created": True,
            "job": stub.jobs[job_id],
        }
    if (method, path) == ("GET", "/v1/jobs"):
        found = [j for j in reversed(stub.jobs.values())
                 if not q.get("state") or j["state"] in q["state"]]  # fmt: skip
        return 200, {"jobs": found[: int(q.get("limit", ["50"])[0])], "next_cursor": None}
    m = re.fullmatch(r"/v1/jobs/([^/]+)/why", path)
    if m and m.group(1) in stub.jobs:
        job = stub.jobs[m.group(1)]
        return 200, {"job_id": job["id"], "state": job["state"], "kind": "capacity",
                     "text": "no node of pool local has 1 CPU free", "position": 1,
                     "pending_total": 1, "checkpoints": []}  # fmt: skip
    m = re.fullmatch(r"/v1/jobs/([^/]+)(/cancel)?", path)
    if m and m.group(1) in stub.jobs:
        job = stub.jobs[m.group(1)]
        if m.group(2):
            job["_states"] = ["stopping", "cancelled"]
            job["state"] = "stopping"
            return 202, job
        if job["_states"]:
            job["state"] = job["_states"].pop(0)
        if job["state"] == "failed":
            job.update(exit_code=3, reason="exited with 3")
        return 200, job
    return _problem(404, "not-found", f"nothing at {path}", "check the id")


class _Handler(BaseHTTPRequestHandler):
    stub: Stub

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, method: str) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        q = parse_qs(url.query)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(*_problem(401, "unauthenticated", "unknown token", "tp login"))
        if url.path == "/v1/archives":
            digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            assert self.headers["X-Content-Digest"] == digest
            self.stub.archives[digest] = raw
            body: Any = {"digest": digest, "size": len(raw)}
        else:
            body = json.loads(raw) if raw else None
        self.stub.seen.append((method, url.path, body))
        queue = self.stub.fail.get((method, url.path)) or []
        if queue and queue[0] != "drop":
            status = queue.pop(0)
            return self._send(*_problem(status, "error", f"injected {status}", "wait"))
        if url.path.endswith("/logs"):
            return self._logs(q)
        if url.path == "/v1/archives":
            return self._send(201, body)
        answer = _route(self.stub, method, url.path, q, body)
        if queue:  # "drop": the work is done but the answer is lost
            queue.pop(0)
            self.close_connection = True
            return None
        return self._send(*answer)

    def _logs(self, q: dict[str, list[str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        for chunk in self.stub.logs:
            self.wfile.write(chunk)
            self.wfile.flush()
        if q.get("follow") == ["true"]:
            self.wfile.write(b"followed to the end\n")

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps({k: v for k, v in body.items() if k != "_states"}
                          if isinstance(body, dict) else body).encode()  # fmt: skip
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
    monkeypatch.setattr(client, "_sleep", lambda s: None)
    monkeypatch.setattr(jobs, "POLL_INTERVAL", 0.0)
    yield state
    server.shutdown()
    server.server_close()


def test_login_checks_the_token_then_stores_it(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TUNEPLANE_SERVER")
    monkeypatch.delenv("TUNEPLANE_TOKEN")
    creds = tmp_path / "cfg" / "credentials.json"
    assert run(["login", "--server", stub.url, "--token", "wrong"]) == errors.AUTH
    assert not creds.exists() and "error: unknown token" in capsys.readouterr().err
    assert run(["login", "--server", stub.url + "/", "--token", TOKEN]) == 0
    assert "as alice (admin)" in capsys.readouterr().out
    assert json.loads(creds.read_text()) == {"server": stub.url, "token": TOKEN}
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    assert run(["whoami"]) == 0 and "alice (admin)" in capsys.readouterr().out


def test_catalog_commands(stub: Stub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["methods"]) == 0 and "custom/custom" in capsys.readouterr().out
    assert run(["methods", "custom/custom", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == METHOD
    assert run(["methods", "custom/custom"]) == 0 and "shell command" in capsys.readouterr().out
    assert run(["methods", "trl/nope"]) == errors.USAGE
    assert "use one of: custom/custom" in capsys.readouterr().err
    assert run(["profiles"]) == 0 and "cpu:1" in capsys.readouterr().out
    assert run(["runtime", "ls"]) == 0 and "busybox:1" in capsys.readouterr().out


def test_unreachable_server_exits_6_without_traceback(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TUNEPLANE_SERVER", "http://127.0.0.1:9")
    assert run(["job", "ls"]) == errors.UNAVAILABLE
    err = capsys.readouterr().err
    assert "error: connection to http://127.0.0.1:9 failed" in err and "tp up" in err
    assert "Traceback" not in err
