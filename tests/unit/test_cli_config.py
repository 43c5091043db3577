"""Credentials storage (0600 file in a 0700 dir, atomic, env overrides) and error rendering:
problem+json → domain error → `error:`/`field:`/`fix:` text and one exit code per kind."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from domain.errors import (
    Conflict,
    Expired,
    Forbidden,
    InvalidInput,
    NotFound,
    RetryKeyReused,
    TooLarge,
    Unauthenticated,
    Unavailable,
)
from entrypoints.cli import config, errors
from entrypoints.cli.main import run

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cfg"
    monkeypatch.setenv("TUNEPLANE_CONFIG_DIR", str(d))
    monkeypatch.delenv("TUNEPLANE_SERVER", raising=False)
    monkeypatch.delenv("TUNEPLANE_TOKEN", raising=False)
    return d


def test_credentials_are_written_0600_in_a_0700_dir(cfg: Path) -> None:
    path = config.save_credentials("http://127.0.0.1:8470/", "tp_secret")
    assert path == cfg / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"server": "http://127.0.0.1:8470", "token": "tp_secret"}
    assert [p.name for p in cfg.iterdir()] == ["credentials.json"]  # no temp file left behind
    creds = config.load_credentials()
    assert (creds.server, creds.token, creds.source) == (
        "http://127.0.0.1:8470", "tp_secret", str(path),
    )  # fmt: skip


def test_rewrite_replaces_and_stays_private(cfg: Path) -> None:
    config.save_credentials("http://a:1", "one")
    config.save_credentials("http://b:2", "two")
    path = cfg / "credentials.json"
    assert json.loads(path.read_text())["token"] == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_environment_overrides_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    config.save_credentials("http://file:1", "file-token")
    monkeypatch.setenv("TUNEPLANE_TOKEN", "env-token")
    creds = config.load_credentials()
    assert (creds.server, creds.token) == ("http://file:1", "env-token")
    monkeypatch.setenv("TUNEPLANE_SERVER", "http://env:2")
    creds = config.load_credentials()
    assert (creds.server, creds.token, creds.source) == ("http://env:2", "env-token", "environment")


def test_missing_login_says_how_to_log_in(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Unauthenticated) as info:
        config.load_credentials()
    assert "tp login --server URL --token T" in info.value.message
    assert run(["job", "ls"]) == errors.AUTH
    err = capsys.readouterr().err
    assert "error: not logged in: run `tp login --server URL --token T` (tp up prints both)" in err
    assert "Traceback" not in err


def test_corrupt_credentials_file_names_the_file(cfg: Path) -> None:
    cfg.mkdir()
    (cfg / "credentials.json").write_text("{oops")
    with pytest.raises(InvalidInput, match=r"credentials\.json") as info:
        config.load_credentials()
    assert "tp login" in info.value.fix


@pytest.mark.parametrize("url", ["localhost:8470", "ftp://x", "http://"])
def test_server_must_be_an_http_url(url: str) -> None:
    with pytest.raises(InvalidInput, match="not an http"):
        config.normalize_server(url)


def problem(status: int, code: str, **extra: object) -> bytes:
    return json.dumps(
        {"type": f"https://tuneplane.dev/errors/{code}", "title": code, "status": status,
         "detail": f"detail of {code}", "fix": f"fix for {code}", "field": "intent.profile",
         **extra}
    ).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("status", "code", "cls", "exit_code"),
    [
        (422, "invalid-input", InvalidInput, 2),
        (400, "invalid-input", InvalidInput, 2),
        (422, "retry-key-reused", RetryKeyReused, 2),
        (413, "too-large", TooLarge, 2),
        (404, "not-found", NotFound, 3),
        (409, "conflict", Conflict, 4),
        (410, "expired", Expired, 4),
        (401, "unauthenticated", Unauthenticated, 5),
        (403, "forbidden", Forbidden, 5),
        (503, "unavailable", Unavailable, 6),
    ],
)
def test_problems_map_to_domain_errors_and_exit_codes(
    status: int, code: str, cls: type, exit_code: int
) -> None:
    err = errors.from_problem(status, "application/problem+json", problem(status, code))
    assert type(err) is cls
    assert (err.message, err.fix, err.field) == (f"detail of {code}", f"fix for {code}",
                                                 "intent.profile")  # fmt: skip
    assert errors.exit_code(err) == exit_code
    assert errors.render(err) == (
        f"error: detail of {code}\nfield: intent.profile\nfix: fix for {code}"
    )


def test_unknown_type_falls_back_to_the_status() -> None:
    err = errors.from_problem(409, "application/problem+json", problem(409, "weird"))
    assert isinstance(err, Conflict) and errors.exit_code(err) == errors.CONFLICT


def test_a_server_error_names_its_request_id_for_the_logs() -> None:
    def answer(status: int) -> bytes:
        body = {"type": "https://tuneplane.dev/errors/internal", "status": status,
                "detail": "boom", "fix": "retry later", "request_id": "rid-7"}  # fmt: skip
        return json.dumps(body).encode()

    err = errors.from_problem(500, "application/problem+json", answer(500))
    assert err.fix == "retry later; the server's log lines of this request carry rid-7"
    # the caller's own mistake needs no operator: its fix stays as the server wrote it
    assert errors.from_problem(404, "application/problem+json", answer(404)).fix == "retry later"


def test_non_json_error_bodies_still_read_well() -> None:
    err = errors.from_problem(502, "text/html", b"<h1>Bad Gateway</h1>")
    assert isinstance(err, errors.ServerError) and errors.is_transient(err)
    assert err.message == (
        "the server answered HTTP 502 with a page that is not a TunePlane answer (Bad Gateway)"
    )
    assert errors.exit_code(err) == 1 and "control plane is down" in err.fix
    err = errors.from_problem(404, "application/json", b"")
    assert isinstance(err, NotFound)
    assert err.message == "the server answered HTTP 404 with a page that is not a TunePlane answer"
    assert errors.render(InvalidInput("bad")) == "error: bad"
    assert not errors.is_transient(InvalidInput("bad"))


def test_another_servers_page_names_the_server_and_the_fix() -> None:
    """A web server that is not TunePlane (a wrong port, a missing path behind a proxy)
    answers an HTML page: the error says which server answered and what to check."""
    page = b"<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1>" * 50
    err = errors.from_problem(404, "text/html; charset=utf-8", page, "http://127.0.0.1:8080")
    assert isinstance(err, NotFound) and errors.exit_code(err) == errors.NOT_FOUND
    assert err.message == (
        "the server at http://127.0.0.1:8080 answered HTTP 404 with a page that is not a"
        " TunePlane answer (404 Not Found)"
    )
    assert "`tp login --server`" in err.fix and "TunePlane API" in err.fix
    err = errors.from_problem(500, "text/plain", b"Internal Server Error", "https://x.example")
    assert isinstance(err, errors.ServerError)
    assert "https://x.example answered HTTP 500" in err.message and "(Internal Server Error)" in (
        err.message
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["job", "ls", "--no-such-option"]) == errors.USAGE
    assert run(["submit", "--commit", "f.json", "--preview"]) == errors.USAGE
    assert "Traceback" not in capsys.readouterr().err
