"""`tp submit` and `tp job` against the stub HTTP server of test_cli_http (a stand-in that
follows docs/http-api.md; the real server is exercised by tests/e2e): the submission file,
fresh retry keys, idempotent commit, retries with the same key, following a job."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from rich.prompt import Confirm

from entrypoints.cli import errors
from entrypoints.cli.main import run
from tests.unit.test_cli_http import Stub, stub  # noqa: F401  (the fixture)

pytestmark = pytest.mark.unit


@pytest.fixture
def ws(stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    w = tmp_path / "ws"
    assert run(["init", str(w)]) == 0
    monkeypatch.chdir(w)
    assert run(["new", "hello", "--method", "custom/custom"]) == 0
    assert run(["validate", "hello"]) == 0
    return w


def preview(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[Path, dict[str, object]]:
    assert run(["submit", "hello", "--profile", "cpu:1", "--preview", *extra]) == 0
    out = capsys.readouterr().out
    path = Path(out.split("next: tp submit --commit ")[1].strip())
    return path, json.loads(path.read_text())


def test_preview_uploads_the_source_and_writes_the_submission_file(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["submit", "hello", "--profile", "cpu:1", "--preview", "--set", "lr=1"]) == 2
    err = capsys.readouterr().err
    assert "error: --set: method custom/custom has no parameter 'lr'" in err
    assert stub.archives == {}  # refused before packing and uploading
    path, sub = preview(capsys, "--set", "command=echo hi")
    assert path.resolve() == ws / ".tuneplane-data" / "submissions" / "pv-1.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sub["server"] == stub.url and sub["preview"] == stub.previews["pv-1"]
    [sent] = stub.bodies("POST", "/v1/previews")
    assert sent["params"] == {"command": "echo hi"}
    assert (sent["experiment"], sent["method"], sent["profiles"], sent["queue"]) == (
        "hello", "custom/custom", ["cpu:1"], None,
    )  # fmt: skip
    assert sent["source"]["digest"] in stub.archives and stub.bodies("POST", "/v1/jobs") == []
    _, again = preview(capsys, "--set", "command=3")
    assert stub.bodies("POST", "/v1/previews")[-1]["params"] == {"command": "3"}  # strings
    assert again["retry_key"] != sub["retry_key"]  # a fresh key for every preview
    assert len(stub.archives) == 1  # the same tree packs to the same archive


def test_preview_summary_shows_the_resolution(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["submit", "hello", "--profile", "cpu:1", "--preview"]) == 0
    out = capsys.readouterr().out
    for words in ("custom/custom", "busybox  busybox:1@sha256:aaaa",
                  "role main  cpu:1 → 1 × (1 CPUs, 512 MB) in pool local", "queue      default",
                  "backend    local", "/bin/sh -c 'sh train.sh'", "preview    pv-1",
                  "digest     sha256:pv-1", "expires    2999-01-01"):  # fmt: skip
        assert words in out, (words, out)


def test_commit_is_idempotent_per_retry_key(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, sub = preview(capsys)
    assert run(["submit", "--commit", str(path)]) == 0
    assert "job job-1 created" in capsys.readouterr().out
    assert run(["submit", "--commit", str(path)]) == 0
    assert "job job-1 (already submitted)" in capsys.readouterr().out
    keys = {b["retry_key"] for b in stub.bodies("POST", "/v1/jobs")}
    assert keys == {sub["retry_key"]} and len(stub.jobs) == 1


def test_transient_failures_are_retried_with_the_same_key(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, sub = preview(capsys)
    stub.fail[("POST", "/v1/jobs")] = [503, 500, "drop"]  # the drop commits, then hangs up
    assert run(["submit", "--commit", str(path)]) == 0
    captured = capsys.readouterr()
    assert "job job-1 (already submitted)" in captured.out
    assert captured.err.count("retrying in") == 3
    sent = stub.bodies("POST", "/v1/jobs")
    assert len(sent) == 4 and {b["retry_key"] for b in sent} == {sub["retry_key"]}
    assert len(stub.jobs) == 1


def test_client_errors_are_not_retried_and_print_the_fix(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = preview(capsys)
    stub.fail[("POST", "/v1/jobs")] = [410]
    assert run(["submit", "--commit", str(path)]) == errors.CONFLICT
    err = capsys.readouterr().err
    assert "error: injected 410" in err and "fix: wait" in err and "retrying" not in err
    assert len(stub.bodies("POST", "/v1/jobs")) == 1
    sub = json.loads(path.read_text())
    sub["preview"]["digest"] = "sha256:tampered"
    path.write_text(json.dumps(sub))
    assert run(["submit", "--commit", str(path)]) == errors.CONFLICT
    assert "digest mismatch" in capsys.readouterr().err
    assert run(["submit", "hello", "--profile", "h900:8", "--preview"]) == errors.USAGE
    err = capsys.readouterr().err
    assert "unknown profile 'h900:8'" in err and "field: intent.profiles[0]" in err


def test_submission_needs_a_profile_and_confirmation(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["submit", "hello", "--preview"]) == errors.USAGE
    assert "no profile given" in capsys.readouterr().err
    assert run(["submit", "hello", "--profile", "cpu:1"]) == errors.USAGE  # stdin is no TTY
    assert "--yes" in capsys.readouterr().err
    assert stub.archives == {}  # refused before packing or uploading anything
    assert run(["submit", "hello", "--commit", "x.json"]) == errors.USAGE
    (ws / "hello" / ".env").write_text("TOKEN=1\n")
    assert run(["submit", "hello", "--profile", "cpu:1", "--preview"]) == errors.USAGE
    assert "hello/.env" not in capsys.readouterr().err  # paths are relative to the experiment
    assert run(["submit", "hello", "--profile", "cpu:1", "--preview", "--allow-secret-files"]) == 0


def test_yes_follow_streams_logs_and_reports_the_end(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["submit", "hello", "--profile", "cpu:1", "--yes", "--follow"]) == 0
    captured = capsys.readouterr()
    assert "job job-1 created" in captured.out
    assert "step 1\nstep 2\nfollowed to the end\n" in captured.out
    assert "job job-1 succeeded" in captured.err
    # a pending job: --follow says that it waits and why (`tp job why`), once per change
    assert captured.err.count("waiting: job job-1 is pending: no node of pool local has") == 1
    stub.states = ["pending", "failed"]
    assert run(["submit", "hello", "--profile", "cpu:1", "--yes", "--wait"]) == errors.FAILED
    assert "job job-2 failed (exit code 3): exited with 3" in capsys.readouterr().out


def test_job_commands(stub: Stub, ws: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert run(["submit", "hello", "--profile", "cpu:1", "--yes"]) == 0
    capsys.readouterr()
    assert run(["job", "ls", "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == ["job-1"]
    assert run(["job", "status", "job-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "pending"
    assert run(["job", "status", "job-1"]) == 0
    assert "state      running" in capsys.readouterr().out
    assert run(["job", "logs"]) == 0  # defaults to the most recent job
    captured = capsys.readouterr()
    assert captured.out == "step 1\nstep 2\n" and "logs of job job-1" in captured.err
    stub.jobs["job-1"]["_states"] = []  # it stays running until stopped
    assert run(["job", "stop", "job-1", "--wait"]) == 0
    out = capsys.readouterr().out
    assert "stop requested for job job-1 (state: stopping)" in out and "cancelled" in out
    # stopping a job that has ended: a cancelled one says so and succeeds (idempotent) ...
    assert run(["job", "stop", "job-1"]) == 0
    assert "job job-1 cancelled: already stopped" in capsys.readouterr().out
    # ... one that succeeded or failed is refused, with how it ended
    stub.jobs["job-1"]["state"] = "succeeded"
    assert run(["job", "stop", "job-1"]) == errors.CONFLICT
    err = capsys.readouterr().err
    assert "job job-1 succeeded; it has already ended, there is nothing to stop" in err
    assert "tp job why job-1" in err
    stub.jobs["job-1"]["state"] = "cancelled"
    assert run(["job", "ls"]) == 0 and "job-1" not in capsys.readouterr().out  # ended
    assert run(["job", "ls", "--all"]) == 0 and "job-1" in capsys.readouterr().out
    assert run(["job", "status", "job-404"]) == errors.NOT_FOUND
    assert run(["job", "ls", "--state", "runing"]) == errors.USAGE  # refused here, named
    err = capsys.readouterr().err
    assert "--state 'runing' is not a job state" in err and "pending, starting" in err


def test_following_the_logs_of_a_job_not_started_says_why_it_waits(
    stub: Stub,  # noqa: F811
    ws: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["submit", "hello", "--profile", "cpu:1", "--yes"]) == 0
    capsys.readouterr()
    assert run(["job", "logs", "job-1", "--follow"]) == 0
    captured = capsys.readouterr()
    assert "waiting: job job-1 is pending: no node of pool local has" in captured.err
    assert captured.out.startswith("step 1\nstep 2\n")  # then streamed to the end


def test_a_terminal_is_asked_before_committing(
    stub: Stub,  # noqa: F811
    ws: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = [False, True]
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr(Confirm, "ask", lambda *a, **k: answers.pop(0))
    assert run(["submit", "hello", "--profile", "cpu:1"]) == 0
    assert "not submitted; later: tp submit --commit" in capsys.readouterr().out
    assert stub.jobs == {}
    assert run(["submit", "hello", "--profile", "cpu:1"]) == 0
    assert "job job-1 created" in capsys.readouterr().out and answers == []
