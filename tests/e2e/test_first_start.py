"""`tp serve` on an empty database bootstraps the admin, as docs/operations.md says (issue 18,
defect 13): two API processes started at once on one empty database and one state directory
make exactly one admin and one token, written 0600 to the state directory, its path printed by
the one that made it; later starts print nothing of it."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import asyncpg
import httpx
import pytest

from adapters.postgres.connect import plain_url
from tests.fixtures.server import TP, _wait_ready, free_port
from tests.support.log_lines import records

pytestmark = pytest.mark.e2e
FIRST = "first start: created user admin and its token"


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [TP, "serve", "--port", str(port), "--no-supervisor"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    return proc, f"http://127.0.0.1:{port}"


async def _tokens(pg_url: str) -> list[str]:
    conn = await asyncpg.connect(plain_url(pg_url))
    try:
        return [r["name"] for r in await conn.fetch("SELECT name FROM api_tokens")]
    finally:
        await conn.close()


async def test_two_api_processes_on_an_empty_database_make_one_admin_token(
    pg_url: str, docker_host: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEPLANE_")}
    env.update(
        TUNEPLANE_DATABASE_URL=pg_url, TUNEPLANE_STATE_DIR=str(state), DOCKER_HOST=docker_host
    )
    logs = [tmp_path / "serve-0.log", tmp_path / "serve-1.log"]
    procs = [_serve(env, log) for log in logs]  # both started before either is ready
    try:
        for (proc, url), log in zip(procs, logs, strict=True):
            _wait_ready(url, proc, log)
        printed = [log.read_text() for log in logs]
        assert sum(FIRST in text for text in printed) == 1, printed
        assert await _tokens(pg_url) == ["admin"]
        path = state / "admin-token"
        assert f"written to {path} (0600)" in "".join(printed)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = path.read_text().strip()
        assert token not in "".join(printed)  # the path is printed, never the secret
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=procs[0][1], headers=headers) as http:
            whoami = (await http.get("/v1/whoami")).json()
        assert (whoami["name"], whoami["role"]) == ("admin", "admin"), whoami
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(15)
    # a later start finds the token: nothing is created or printed again (in json mode, the
    # API's log is JSON lines of role api: docs/operations.md#logs)
    again = tmp_path / "serve-2.log"
    proc, url = _serve({**env, "TUNEPLANE_LOG_FORMAT": "json"}, again)
    try:
        _wait_ready(url, proc, again)
        async with httpx.AsyncClient(base_url=url) as http:
            refused = await http.get("/v1/whoami", headers={"X-Request-Id": "first-start-1"})
        assert refused.status_code == 401 and refused.headers["x-request-id"] == "first-start-1"
    finally:
        proc.terminate()
        proc.wait(15)
    assert FIRST not in again.read_text()
    [line] = [r for r in records(again, "api") if r.get("request_id") == "first-start-1"]
    assert "GET /v1/whoami answered 401" in line["msg"], line
    assert await _tokens(pg_url) == ["admin"] and path.read_text().strip() == token
