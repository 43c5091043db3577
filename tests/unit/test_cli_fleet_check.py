"""`tp fleet check POOL` against the stub HTTP server of test_cli_admin: it starts a check,
waits for its end, prints a table per node and exits 1 when a node failed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from entrypoints.cli import errors, fleet_check
from entrypoints.cli.main import run
from tests.unit.test_cli_admin import Stub, problem, stub  # noqa: F401  (the fixture)
from tests.unit.test_cli_fleet import CHECK

pytestmark = pytest.mark.unit

PATH = "/v1/pools/a/checks"
RUNNING: dict[str, Any] = {**CHECK, "finished_at": None, "ok": None, "results": []}
PASSED: dict[str, Any] = {
    **CHECK,
    "ok": True,
    "results": [
        {"node": "a-0", "ok": True, "detail": "1 of 1 peers reached"},
        {"node": "a-1", "ok": True, "detail": "1 of 1 peers reached, shared storage verified"},
    ],
}


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_check, "POLL_SECONDS", 0.0)


def test_check_waits_for_the_end_and_fails_when_a_node_failed(
    stub: Stub,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub.answers[("POST", PATH)] = (201, RUNNING)
    stub.answers[("GET", f"{PATH}/latest")] = (200, CHECK)
    assert run(["fleet", "check", "a", "--timeout", "10"]) == 1
    assert stub.body("POST", PATH) == {"timeout_seconds": 10}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "check chk-1 of pool a: job job-1 on a-0, a-1"
    assert lines[1] == "pool a: FAILED at 2026-12-03T18:34:29Z"
    assert lines[2].split() == ["NODE", "RESULT", "DETAIL"]
    assert lines[3].split()[:2] == ["a-0", "ok"]
    assert lines[4].split()[:2] == ["a-1", "FAILED"] and "unreachable from a-0" in lines[4]

    stub.answers[("GET", f"{PATH}/latest")] = (200, PASSED)
    assert run(["fleet", "check", "a"]) == 0
    assert "pool a: passed at" in capsys.readouterr().out


def test_check_no_wait_last_and_json(
    stub: Stub,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub.answers[("POST", PATH)] = (201, RUNNING)
    assert run(["fleet", "check", "a", "--no-wait"]) == 0  # started; nothing failed yet
    assert "running since 2026-12-03T18:34:00Z" in capsys.readouterr().out
    assert [m for m, p, _ in stub.seen] == ["POST"]

    stub.answers[("GET", f"{PATH}/latest")] = (200, CHECK)
    assert run(["fleet", "check", "a", "--last"]) == 1  # starts none, shows the last verdict
    assert "FAILED" in capsys.readouterr().out
    assert [m for m, p, _ in stub.seen].count("POST") == 1
    assert run(["fleet", "check", "a", "--last", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == CHECK


def test_check_errors_map_to_exit_codes(
    stub: Stub,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub.answers[("POST", PATH)] = problem(
        422, "invalid-input", "pool a has 1 connected, schedulable node(s)", "connect more", "pool"
    )
    assert run(["fleet", "check", "a"]) == errors.USAGE
    assert "1 connected, schedulable node" in capsys.readouterr().err
    stub.answers[("POST", PATH)] = problem(409, "conflict", "a check is running already")
    assert run(["fleet", "check", "a"]) == errors.CONFLICT
    assert run(["fleet", "check", "b", "--last"]) == errors.NOT_FOUND
