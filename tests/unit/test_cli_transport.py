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
from domain.errors import InvalidInput, TunePlaneError, Unavailable
from entrypoints.cli import errors, proxies
from entrypoints.cli.client import Api, with_retries
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


@pytest.mark.parametrize(
    "server", ["ftp://h/x", "http://", "127.0.0.1:8470", "http://h:99999", "http://h:80x"]
)
def test_a_server_url_without_a_valid_host_and_port_is_refused(server: str) -> None:
    with pytest.raises(InvalidInput, match="is not an http:// or https:// URL"):
        Api(server, "tok")


@contextmanager
def refusing_at_the_headers(status: str) -> Iterator[tuple[str, list[int]]]:
    """A server that answers ``status`` to each request's headers, reads none of its body and
    closes at once (what a server does to an upload too large or not allowed)."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []
    body = json.dumps({"title": "no", "detail": "the archive is over the limit"}).encode()

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            conn.sendall(
                f"HTTP/1.1 {status}\r\nContent-Type: application/problem+json\r\n"
                f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            conn.close()  # with the body unread: the client's send is reset

    threading.Thread(target=answer, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()


def test_an_upload_refused_before_its_body_is_read_gets_the_answer_not_a_reset() -> None:
    with refusing_at_the_headers("413 Content Too Large") as (url, accepted):
        size = 16 * 2**20
        with Api(url, "tok") as api, pytest.raises(TunePlaneError) as err:
            with_retries(lambda: api.upload("/v1/archives", [b"x" * size], size, "d"), "upload")
    assert not isinstance(err.value, Unavailable) and "over the limit" in str(err.value)
    assert len(accepted) == 1  # an answer, so not sent again


class _DropsSecond(_Api):
    """Closes a kept connection when its second request arrives, unanswered: the server's
    keep-alive running out just as the client reused the connection."""

    def handle_one_request(self) -> None:
        self.served = getattr(self, "served", 0) + 1
        if self.served == 2:
            self.raw_requestline = self.rfile.readline()
            self.seen.requests.append(("dropped", "", {}, self.client_address[1]))
            self.close_connection = True
            return
        super().handle_one_request()


def test_a_get_on_a_connection_closed_as_it_was_reused_is_sent_once_more() -> None:
    with serving(_DropsSecond) as (port, seen), Api(f"http://127.0.0.1:{port}", "tok") as api:
        assert api.get("/v1/whoami")["name"] == "alice"
        assert api.get("/v1/whoami")["name"] == "alice"  # dropped, then on a new connection
        assert [r[0] for r in seen.requests] == ["GET", "dropped", "GET"]
        with pytest.raises(Unavailable):  # a POST may have been acted on: not sent again
            api.post("/v1/things", {"a": 1})
    assert [r[0] for r in seen.requests] == ["GET", "dropped", "GET", "dropped"]


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


def test_an_ipv6_or_unicode_server_is_named_to_the_proxy_as_proxies_read_it(
    tls_api: tuple[int, Seen], proxy: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, _ = tls_api
    where, seen = proxy
    monkeypatch.setenv("HTTPS_PROXY", f"http://{where}")
    # the test's proxy relays to its own server, whose certificate names localhost only
    with Api(f"https://[::1]:{port}", "tok") as api, pytest.raises(Unavailable, match="::1"):
        api.get("/v1/whoami")
    assert seen.requests[-1][:2] == ("CONNECT", f"[::1]:{port}")
    monkeypatch.setenv("HTTP_PROXY", f"http://{where}")
    with Api("http://bücher.example:8470", "tok") as api:
        assert api.get("/v1/whoami")["name"] == "via-proxy"
    assert seen.requests[-1][1] == "http://xn--bcher-kva.example:8470/v1/whoami"


def test_a_proxy_url_with_a_bad_port_is_refused_with_the_variable_to_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:31x8")
    with pytest.raises(InvalidInput, match="no valid port") as err:
        Api("http://tp.example", "tok")
    assert "HTTP_PROXY" in err.value.fix


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "bypassed"),
    [
        ("::1", 8470, "localhost,127.0.0.1,::1", True),
        ("::1", 8470, "[::1]:8470", True),
        ("::1", 8471, "[::1]:8470", False),
        ("tp.example.com", 443, ".example.com", True),
        ("tp.example.com", 443, "*.example.com", True),
        ("example.com", 443, "example.com", True),
        ("tp.example.com", 443, "example.com", True),
        ("notexample.com", 443, "example.com", False),
        ("tp.example", 8470, "tp.example:9999", False),
        ("tp.example", 8470, "tp.example:8470", True),
        ("tp.example", 8470, "localhost, *", True),
        ("tp.example", 8470, "", False),
        ("10.1.2.3", 80, "10.0.0.0/8", True),
        ("11.1.2.3", 80, "10.0.0.0/8", False),
        ("127.0.0.1", 80, "localhost", False),
        ("tp.example", 80, " TP.Example ", True),
    ],
)
def test_no_proxy_is_read_as_curl_reads_it(
    host: str, port: int, no_proxy: str, bypassed: bool
) -> None:
    assert proxies.bypassed(host, port, no_proxy) is bypassed
