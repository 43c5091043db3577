"""Structured logs (issue 24 item 2, docs/operations.md#logs), on one whole `tp up` started with
TUNEPLANE_LOG_FORMAT=json: every process it runs (the API in `tp up` itself, both gateways, the
local node daemon and its collector) writes nothing but JSON lines naming its role; an API
request's id is in its log lines and its response, a hostile X-Request-Id is never echoed; a
failing job's lines carry its job id (in the API's supervisor, the daemon and the collector)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_up import Up
from tests.e2e.test_walkthrough import job_id_in
from tests.support.log_lines import records
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEX_ID = re.compile(r"[0-9a-f]{32}")


def raw_request(port: int, token: str, request_id: bytes) -> bytes:
    """GET /v1/jobs/nope with ``X-Request-Id: <request_id>`` sent as raw bytes (an HTTP client
    refuses to send most of them); the response's head."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            b"GET /v1/jobs/nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n"
            b"X-Request-Id: " + request_id + b"\r\n\r\n"
        )
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := s.recv(65536)):
            answer += chunk
    return answer.split(b"\r\n\r\n", 1)[0]


HOSTILE = {
    "NUL": b"abc\x00def",
    "newline (folded)": b"abc\r\n injected=1",
    "10 kB": b"r" * 10_000,
    "non-ASCII": "réq-é".encode(),
    "a space and a key": b"abc job_id=forged",
}


def test_tp_up_in_json_mode_logs_json_lines_with_roles_and_ids(up: Up, tmp_path: Path) -> None:
    up.env.update(TUNEPLANE_LOG_FORMAT="json", TUNEPLANE_LOG_LEVEL="info")
    up.start()
    said = "\n".join(r["msg"] for r in records(up.log, "up"))  # the announcement too
    assert "Ctrl-C stops it." in said
    cli, token = up.workspace(said, tmp_path)
    auth = {"Authorization": f"Bearer {token}"}

    # an API request's id: the client's, sent back and on the line of its problem answer
    with httpx.Client(base_url=f"http://127.0.0.1:{up.port}", timeout=30) as api:
        answer = api.get("/v1/jobs/nope", headers={**auth, "X-Request-Id": "trace-42.a"})
        assert answer.status_code == 404 and answer.headers["x-request-id"] == "trace-42.a"
        assert answer.json()["request_id"] == "trace-42.a"  # in the problem body as well
        fresh = api.get("/v1/jobs/nope", headers=auth).headers["x-request-id"]
        assert HEX_ID.fullmatch(fresh)  # none sent: one made
    line = wait_until(
        what="the request's log line",
        probe=lambda: [r for r in records(up.log, "up") if r.get("request_id") == "trace-42.a"],
    )
    assert line[0]["job_id"] == "nope" and "answered 404 not-found" in line[0]["msg"], line

    # a hostile X-Request-Id is replaced by a new id (or the request refused), never echoed
    for name, value in HOSTILE.items():
        head = raw_request(up.port, token, value)
        assert head.startswith(b"HTTP/1.1 4"), (name, head)
        given = re.search(rb"(?im)^x-request-id: ([^\r\n]*)", head)
        if given is not None:  # the API answered: with an id of its own
            assert HEX_ID.fullmatch(given.group(1).decode()), (name, head)
    text = up.log.read_text()
    for name, value in HOSTILE.items():
        shown = value.decode("latin-1")
        assert shown not in text and json.dumps(shown)[1:-1] not in text, name
    assert '"injected' not in text and '"job_id": "forged"' not in text

    # a failing job: its lines carry its id in the API's supervisor, the daemon, the collector
    out = cli("submit", "hello", "--profile", "cpu:1", "--set", "command=exit 3", "--yes")
    job_id = job_id_in(out.stdout)
    assert cli.wait_state(job_id, {"succeeded", "failed"}, 120)["state"] == "failed"

    def of_job(path: Path, role: str) -> list[dict[str, Any]]:
        return [r for r in records(path, role) if r.get("job_id") == job_id]

    ended = wait_until(what="the supervisor's line", probe=lambda: of_job(up.log, "up"))
    assert any(f"job {job_id} now failed" in r["msg"] and r["attempt"] == 1 for r in ended)
    node = wait_until(
        what="the daemon's lines", probe=lambda: of_job(up.state / "node.log", "node")
    )
    assert any("exited with 3" in r["msg"] for r in node), node
    assert {(r["node"], r["member"], r.get("attempt")) for r in node} == {("local", 0, 1)}
    collector = up.state / "node" / "collector" / "collector.log"
    assert wait_until(what="the collector's lines", probe=lambda: of_job(collector, "collector"))

    # and nothing but JSON lines of each role in every log
    records(up.state / "gateway.log", "node-gateway")
    records(up.state / "telemetry-gateway.log", "telemetry-gateway")
    records(up.log, "up")
