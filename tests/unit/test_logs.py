"""The one log set-up (entrypoints/logs.py), the ids a line carries (application/log_context.py)
and the API's request ids (entrypoints/api/request_ids.py), in-process; a whole `tp up` in json
mode is tests/e2e/test_logs.py."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from adapters.memory.backend import MemoryBackend
from application import log_context
from application.auth import create_token
from domain.errors import InvalidInput
from entrypoints import logs
from entrypoints.api.app import create_app
from entrypoints.api.request_ids import request_id
from entrypoints.up_nodes import _what_it_said
from tests.support.context import memory_context

pytestmark = pytest.mark.unit

HEX_ID = re.compile(r"[0-9a-f]{32}")
TEXT_LINE = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<level>[A-Z]+) (?P<role>[a-z-]+) "
    r"(?P<logger>\S+): (?P<rest>.*)"
)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {n: logging.getLogger(n).level for n in logs.QUIET}
    yield
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
    root.setLevel(level)
    for n, lv in quiet.items():
        logging.getLogger(n).setLevel(lv)
    logs._json = False


def _set_up(monkeypatch: pytest.MonkeyPatch, fmt: str, level: str = "info") -> io.StringIO:
    monkeypatch.setenv("TUNEPLANE_LOG_FORMAT", fmt)
    monkeypatch.setenv("TUNEPLANE_LOG_LEVEL", level)
    out = io.StringIO()
    logs.setup("node", stream=out, hooks=False)
    return out


HOSTILE = "evil\nFAKE 2026-01-01T00:00:00.000Z ERROR api x: forged\r\x00\x1b[31m\u2028end"


def test_text_lines_are_one_per_record_and_escape_what_could_forge_a_line(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    out = _set_up(monkeypatch, "text")
    log = logging.getLogger("tuneplane.test")
    with log_context.bound(job_id="job-1", attempt=2, member=0, node=HOSTILE):
        log.info("member said %s", HOSTILE)
        try:
            raise ValueError("bad\nvalue")
        except ValueError:
            log.exception("it failed")
    log.debug("not at info")
    lines = out.getvalue().splitlines()
    first = TEXT_LINE.fullmatch(lines[0])
    assert first is not None, lines[0]
    assert (first["level"], first["role"], first["logger"]) == ("INFO", "node", "tuneplane.test")
    escaped = logs.one_line(HOSTILE)
    assert "\n" not in escaped and "\x00" not in escaped and "\u2028" not in escaped
    assert first["rest"] == (
        f"member said {escaped} job_id=job-1 attempt=2 member=0 node={escaped}"
    )
    assert TEXT_LINE.fullmatch(lines[1])  # the traceback follows, every line indented
    assert lines[2:] and all(line.startswith("  ") for line in lines[2:]), lines
    assert "  ValueError: bad" in lines and "  value" in lines
    assert not any("not at info" in line for line in lines)


def test_json_lines_carry_exactly_the_documented_keys(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    out = _set_up(monkeypatch, "json")
    log = logging.getLogger("tuneplane.test")
    log.warning("plain %d", 1, extra={"color_message": "a library's own attribute"})
    with log_context.bound(request_id="r-1", job_id="job-1"):
        with log_context.bound(attempt=1, member=3):
            try:
                raise KeyError("k")
            except KeyError:
                log.exception("réponse %s", HOSTILE)
        log.info("after the inner block")
    plain, failed, after = (json.loads(line) for line in out.getvalue().splitlines())
    assert set(plain) == {"ts", "level", "role", "logger", "msg"}
    assert plain["level"] == "WARNING" and plain["role"] == "node" and plain["msg"] == "plain 1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", plain["ts"])
    assert failed["msg"] == f"réponse {HOSTILE}"  # kept whole, escaped by JSON
    assert (failed["request_id"], failed["job_id"], failed["attempt"], failed["member"]) == (
        "r-1",
        "job-1",
        1,
        3,
    )
    assert failed["exc"].startswith("Traceback") and "KeyError: 'k'" in failed["exc"]
    assert "attempt" not in after and after["job_id"] == "job-1"  # the inner ids were reset
    assert out.getvalue().isascii()  # non-ASCII escaped too: any terminal or collector reads it


def test_ids_reach_the_tasks_started_within_and_only_those(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    out = _set_up(monkeypatch, "json")
    log = logging.getLogger("tuneplane.test")

    async def main() -> None:
        async def member(n: int) -> None:
            await asyncio.sleep(0)
            log.info("member %d", n)

        tasks = []
        for n in range(3):
            with log_context.bound(job_id=f"job-{n}", member=n):
                tasks.append(asyncio.create_task(member(n)))
        log.info("outside")
        await asyncio.gather(*tasks)

    asyncio.run(main())
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    by_msg = {r["msg"]: r for r in lines}
    assert "job_id" not in by_msg["outside"]
    for n in range(3):
        assert (by_msg[f"member {n}"]["job_id"], by_msg[f"member {n}"]["member"]) == (
            f"job-{n}",
            n,
        )


def test_say_and_report_are_json_records_in_json_mode_whatever_the_level(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _set_up(monkeypatch, "json", level="critical")
    logs.say("node gateway on 0.0.0.0:8471\nsecond line")
    logs.report(InvalidInput("cannot listen", fix="give another port", field="port"))
    said, reported = (json.loads(line) for line in out.getvalue().splitlines())
    assert said["msg"] == "node gateway on 0.0.0.0:8471\nsecond line" and said["level"] == "INFO"
    assert reported["level"] == "ERROR" and reported["msg"] == "cannot listen"
    assert (reported["fix"], reported["field"], reported["code"]) == (
        "give another port",
        "port",
        "invalid-input",
    )
    assert capsys.readouterr().out == ""
    # what `tp up` shows of a child that exited: its message and its fix, in either format
    assert _what_it_said(out.getvalue()) == (
        "node gateway on 0.0.0.0:8471\nsecond line\ncannot listen",
        ["give another port"],
    )
    assert _what_it_said("error: cannot listen\nfix: give another port\n") == (
        "error: cannot listen",
        ["give another port"],
    )


def test_say_and_report_print_as_before_in_text_mode(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _set_up(monkeypatch, "text")
    logs.say("node gateway on 0.0.0.0:8471")
    logs.report(InvalidInput("cannot listen", fix="give another port"), stream=sys.stderr)
    printed = capsys.readouterr()
    assert printed.out == "node gateway on 0.0.0.0:8471\n"
    assert printed.err == "error: cannot listen\nfix: give another port\n"
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("TUNEPLANE_LOG_FORMAT", "xml", "TUNEPLANE_LOG_FORMAT='xml' is not one of text, json"),
        ("TUNEPLANE_LOG_LEVEL", "loud", "TUNEPLANE_LOG_LEVEL='loud' is not one of critical"),
    ],
)
def test_a_bad_setting_stops_the_process_naming_it(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as stopped:
        logs.setup("api", stream=io.StringIO(), hooks=False)
    assert said in str(stopped.value) and "fix:" in str(stopped.value)


def test_uvicorn_says_its_own_lines_only_from_warning_unless_debugging() -> None:
    assert [logs.uvicorn_level(v) for v in ("info", "warning", "error", "debug", "trace")] == [
        "warning",
        "warning",
        "error",
        "debug",
        "trace",
    ]


@pytest.mark.parametrize(
    "given",
    ["abc\x00def", "abc\ndef", "r" * 10_000, "réq", "abc job_id=forged", "", "a" * 129, "a=b"],
)
def test_a_hostile_request_id_is_replaced(given: str) -> None:
    header = given.encode("utf-8", "surrogateescape")
    scope: Any = {"headers": [(b"x-request-id", header)]}
    made = request_id(scope)
    assert HEX_ID.fullmatch(made) and made != request_id(scope)


@pytest.mark.parametrize("given", ["trace-42.a", "0af7651916cd43dd8448eb211c80319c", "a" * 128])
def test_a_sane_request_id_is_kept(given: str) -> None:
    scope: Any = {"headers": [(b"x-request-id", given.encode())]}
    assert request_id(scope) == given


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Any]:
    app = create_app(memory_context(tmp_path, MemoryBackend()), supervise=False)
    headers = {"Authorization": f"Bearer {await create_token(app.state.ctx, 'admin')}"}
    async with AsyncTestClient(app=app) as c:
        c.headers.update(headers)
        yield c


async def test_every_answer_carries_the_request_id_and_a_problem_is_logged_with_it(
    client: Any, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    out = _set_up(monkeypatch, "json")
    ok = await client.get("/healthz", headers={"X-Request-Id": "health-1"})
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "health-1"
    missing = await client.get("/v1/jobs/job-x/why", headers={"X-Request-Id": "why-1"})
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "why-1"
    refused = await client.get("/v1/jobs/a%00b", headers={"X-Request-Id": "nul-1"})  # guard.py
    assert refused.status_code == 400 and refused.headers["x-request-id"] == "nul-1"
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    by_id = {r["request_id"]: r for r in lines}
    assert "health-1" not in by_id  # an answer that is not a problem is not logged
    assert by_id["why-1"]["job_id"] == "job-x" and by_id["why-1"]["level"] == "INFO"
    assert by_id["why-1"]["msg"].startswith("GET /v1/jobs/job-x/why answered 404 not-found: ")
    assert "job_id" not in by_id["nul-1"]  # a path parameter that is not a sane id is not one
    assert "answered 400 invalid-input" in by_id["nul-1"]["msg"]
    assert log_context.current() == {}  # nothing is left bound after the requests


@pytest.fixture
def process_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What a long-running command's ``setup`` changes beyond the handlers, put back."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    yield
    logging.captureWarnings(False)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TUNEPLANE_NODE_GATEWAY_PORT", "abc"), ("TUNEPLANE_LOG_LEVEL", "loud")],
)
def test_a_bad_setting_stops_a_json_process_with_one_json_record(
    monkeypatch: pytest.MonkeyPatch,
    restore_logging: None,
    process_hooks: None,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
) -> None:
    """`tp gateway node` as `tp` runs it (``main.run``): in json mode a bad setting, even the
    log level, is one record in the shape of its other lines, not the plain `error:` line."""
    from entrypoints.cli.main import run

    monkeypatch.setenv("TUNEPLANE_LOG_FORMAT", "json")
    monkeypatch.setenv(variable, value)
    assert run(["gateway", "node"]) == 1
    printed = capsys.readouterr()
    assert printed.out == ""
    [line] = printed.err.splitlines()
    record = json.loads(line)
    assert set(record) == {"ts", "level", "role", "logger", "msg", "code", "field", "fix"}
    assert (record["level"], record["role"], record["logger"]) == (
        "ERROR",
        "node-gateway",
        "tuneplane",
    )
    assert record["msg"].startswith(f"{variable}={value!r} is not ")
    assert record["field"] == variable and variable in record["fix"]


def test_a_bad_setting_stops_a_text_process_with_its_plain_line_as_before(
    monkeypatch: pytest.MonkeyPatch,
    restore_logging: None,
    process_hooks: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from entrypoints.cli.main import run

    monkeypatch.setenv("TUNEPLANE_LOG_FORMAT", "text")
    monkeypatch.setenv("TUNEPLANE_NODE_GATEWAY_PORT", "abc")
    with pytest.raises(SystemExit) as stopped:  # Python prints its text on stderr, status 1
        run(["gateway", "node"])
    assert str(stopped.value) == (
        "error: TUNEPLANE_NODE_GATEWAY_PORT='abc' is not a whole number from 1 to 65535 "
        "(fix: set TUNEPLANE_NODE_GATEWAY_PORT to a whole number from 1 to 65535, or unset it)"
    )
    assert capsys.readouterr().err == ""
