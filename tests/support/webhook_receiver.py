"""A real HTTP receiver of webhooks on loopback, in a thread of the test: it records every
request (path, headers, body) and answers as its path's plan says: 200 by default, a list of
statuses to answer in turn (then 200), or hang until the test releases it."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    plans: dict[str, list[int]] = field(default_factory=dict)  # path → statuses, in turn
    hanging: set[str] = field(default_factory=set)  # paths that hang until released
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: int = 0  # requests hanging now

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]


@contextmanager
def receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A receiver on 127.0.0.1 (https with ``tls``, a server context)."""
    box: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            r = box["r"]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with r.lock:
                r.received.append(Received(self.path, dict(self.headers.items()), body))
                plan = r.plans.get(self.path)
                status = plan.pop(0) if plan else 200
                hang = self.path in r.hanging
                if hang:
                    r.waiting += 1
            if hang:
                r.release.wait(60)
                with r.lock:
                    r.waiting -= 1
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the sender is gone (killed, or it gave up waiting)
                self.close_connection = True

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    box["r"] = Receiver(f"{scheme}://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box["r"]
    finally:
        box["r"].release.set()
        server.shutdown()
        server.server_close()
