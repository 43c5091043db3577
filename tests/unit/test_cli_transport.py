"""The CLI's HTTP transport (entrypoints/cli/client.py, on http.client) against real sockets:
one connection kept alive and replaced when the server ended it, a stream left halfway, the
environment's proxies (absolute-form requests and CONNECT tunnels, their credentials, NO_PROXY)
and TLS checked against the trust store SSL_CERT_FILE names."""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adapters.tls import generate_ca, issue_server_cert, server_context
from domain.errors import InvalidInput, Unavailable
from entrypoints.cli import errors
from entrypoints.cli.client import Api
from entrypoints.cli.main import run

pytestmark = pytest.mark.unit
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@dataclass
class Seen:
    """What a server was asked: each request line, its headers, and the client's port."""

    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)
    close_after_answer: bool = False  # end the connection without saying so (keep-alive expiry)


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive
    seen: Seen

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes, chunked: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (body[:5], body[5:], b""):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        self.wfile.flush()
        if self.seen.close_after_answer:
            self.close_connection = True

    def do_GET(self) -> None:
        self.seen.requests.append(
            (self.command, self.path, dict(self.headers.items()), self.client_address[1])
        )
        if self.path.partition("?")[0].endswith("/logs"):
            self._answer(200, b"line 1\nline 2\nline 3\n", chunked=True)
        else:
            self._answer(200, json.dumps({"name": "alice", "role": "admin"}).encode())

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(size)
        self.seen.requests.append(("POST", self.path, dict(self.headers.items()), size))
        self._answer(201, json.dumps({"got": body.decode()}).encode())


@pytest.fixture(autouse=True)
def no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
) -> Iterator[tuple[int, Seen]]:
    """``handler`` serving on a loopback port (over TLS with ``tls``): the port, what it saw."""
    seen = Seen()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Serving", (handler,), {"seen": seen}))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def api_server() -> Iterator[tuple[str, Seen]]:
    with serving(_Api) as (port, seen):
        yield f"http://127.0.0.1:{port}", seen


def test_one_connection_serves_a_command_and_a_closed_one_is_replaced(
    api_server: tuple[str, Seen],
) -> None:
    url, seen = api_server
    with Api(url, "tok") as api:
        assert api.get("/v1/whoami")["name"] == "alice"
        assert api.post("/v1/things", {"a": 1}) == (201, {"got": '{"a": 1}'})
        ports = {port for _, _, _, port in seen.requests if port > 1000}
        assert len(ports) == 1  # the second request reused the first's connection
        seen.close_after_answer = True
        api.get("/v1/whoami")  # the server ends this connection after answering, silently
        seen.close_after_answer = False
        assert api.get("/v1/whoami")["name"] == "alice"  # on a new one, not an error
    assert seen.requests[0][2]["Authorization"] == "Bearer tok"
    assert seen.requests[1][2]["Content-Type"] == "application/json"


def test_a_stream_left_halfway_does_not_garble_the_next_answer(
    api_server: tuple[str, Seen],
) -> None:
    url, _ = api_server
    with Api(url, "tok") as api:
        with api.stream("/v1/jobs/j/logs") as chunks:
            assert next(chunks).startswith(b"line")
        assert api.get("/v1/whoami")["name"] == "alice"
        with api.stream("/v1/jobs/j/logs", {"follow": False, "member": 0}) as chunks:
            assert b"".join(chunks) == b"line 1\nline 2\nline 3\n"


def test_query_values_are_written_as_before(api_server: tuple[str, Seen]) -> None:
    url, seen = api_server
    with Api(url, "tok") as api:
        api.get("/v1/jobs", {"state": ["pending", "running"], "why": True, "start": None, "n": 5})
    assert seen.requests[-1][1] == "/v1/jobs?state=pending&state=running&why=true&start=&n=5"


def test_a_path_under_the_server_url_is_kept(api_server: tuple[str, Seen]) -> None:
    url, seen = api_server
    with Api(url + "/tuneplane/", "tok") as api:
        api.get("/v1/whoami")
    assert seen.requests[-1][1] == "/tuneplane/v1/whoami"


@pytest.mark.parametrize("server", ["ftp://h/x", "http://", "127.0.0.1:8470"])
def test_a_server_that_is_not_an_http_url_is_refused(server: str) -> None:
    with pytest.raises(InvalidInput, match="is not an http:// or https:// URL"):
        Api(server, "tok")


class _Proxy(BaseHTTPRequestHandler):
    """A forward proxy: absolute-form requests answered by forwarding them, CONNECT by a
    tunnel to the named host; each request line and its headers recorded."""

    seen: Seen

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.requests.append((self.command, self.path, dict(self.headers.items()), 0))
        body = json.dumps({"name": "via-proxy", "role": "viewer"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_CONNECT(self) -> None:
        self.seen.requests.append((self.command, self.path, dict(self.headers.items()), 0))
        port = self.path.rpartition(":")[2]
        upstream = socket.create_connection(("127.0.0.1", int(port)))
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        pair = [self.connection, upstream]
        while True:  # relay both ways until either side closes
            readable, _, _ = select.select(pair, [], [], 5)
            if not readable:
                break
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    upstream.close()
                    return
                (upstream if sock is self.connection else self.connection).sendall(data)
        upstream.close()


@pytest.fixture
def proxy() -> Iterator[tuple[str, Seen]]:
    with serving(_Proxy) as (port, seen):
        yield f"127.0.0.1:{port}", seen


def test_an_http_proxy_from_the_environment_is_asked_for_the_absolute_url(
    proxy: tuple[str, Seen],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", f"http://pal:p%40ss@{where}")
    monkeypatch.setenv("TUNEPLANE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("TUNEPLANE_SERVER", "http://tp.invalid:8470")  # resolved by nobody here
    monkeypatch.setenv("TUNEPLANE_TOKEN", "tok")
    assert run(["whoami"]) == 0 and "via-proxy" in capsys.readouterr().out
    method, target, headers, _ = seen.requests[-1]
    assert (method, target) == ("GET", "http://tp.invalid:8470/v1/whoami")
    assert headers["Proxy-Authorization"] == "Basic cGFsOnBAc3M="  # pal:p@ss
    assert headers["Authorization"] == "Bearer tok"

    monkeypatch.setenv("NO_PROXY", "tp.invalid")  # straight to the server, which is nowhere
    assert run(["whoami"]) == errors.UNAVAILABLE
    assert "connection to http://tp.invalid:8470 failed" in capsys.readouterr().err
    assert len(seen.requests) == 1


def test_a_proxy_that_is_down_is_named_in_the_error_without_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for var, server in (("HTTP_PROXY", "http://tp.invalid"), ("HTTPS_PROXY", "https://tp.invalid")):
        monkeypatch.setenv(var, f"http://pal:secret@127.0.0.1:{port}")
        with Api(server, "tok") as api, pytest.raises(Unavailable) as err:
            api.get("/v1/whoami")
        assert f"{server} through the proxy http://127.0.0.1:{port} failed" in str(err.value)
        assert "NO_PROXY" in err.value.fix and "secret" not in str(err.value)


def test_an_https_proxy_url_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    with pytest.raises(InvalidInput) as err:
        Api("https://tp.example", "tok")
    assert "NO_PROXY" in err.value.fix


@pytest.fixture
def tls_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, Seen]]:
    """The API stub over TLS, its certificate for localhost from a CA that SSL_CERT_FILE names."""
    ca = generate_ca(tmp_path / "ca")
    cert = issue_server_cert(tmp_path / "ca", tmp_path / "server", ["localhost"])
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))
    with serving(_Api, server_context(cert.cert, cert.key)) as served:
        yield served


def test_https_is_checked_against_the_trust_store_directly_and_through_a_tunnel(
    tls_api: tuple[int, Seen], proxy: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, api_seen = tls_api
    with Api(f"https://localhost:{port}", "tok") as api:
        assert api.get("/v1/whoami")["name"] == "alice"
    wrong_name = Api(f"https://127.0.0.1:{port}", "tok")  # not a name the certificate holds
    with wrong_name as api, pytest.raises(Unavailable, match="certificate"):
        api.get("/v1/whoami")

    where, proxy_seen = proxy
    monkeypatch.setenv("HTTPS_PROXY", f"http://pal:secret@{where}")
    with Api(f"https://localhost:{port}", "tok") as api:
        assert api.get("/v1/whoami")["name"] == "alice"
        assert api.get("/v1/whoami")["name"] == "alice"  # the tunnel kept alive
    method, target, headers, _ = proxy_seen.requests[-1]
    assert (method, target) == ("CONNECT", f"localhost:{port}") and len(proxy_seen.requests) == 1
    assert headers["Proxy-Authorization"] == "Basic cGFsOnNlY3JldA=="  # pal:secret
    assert "Proxy-Authorization" not in api_seen.requests[-1][2]  # never sent to the server

    monkeypatch.delenv("SSL_CERT_FILE")  # the system's store does not know the test's CA
    untrusted = Api(f"https://localhost:{port}", "tok")
    with untrusted as api, pytest.raises(Unavailable, match="certificate"):
        api.get("/v1/whoami")
