"""The real container engine served on a socket of the test's own (socat), to stop answering
and come back without touching the shared engine: ``stop`` kills the listener and every
connection it forwarded (keep-alive ones too), as an engine that dies or restarts does; and a
process that starts serving the socket again is, to a reader of its start time, an engine that
restarted (adapters/docker/ends.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class EngineProxy:
    """``path`` served as the engine at ``target`` by socat in its own process group."""

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            ["socat", f"UNIX-LISTEN:{self.path},fork", f"UNIX-CONNECT:{self.target}"],
            start_new_session=True,
        )
        deadline = time.monotonic() + 30  # a bound on a hang
        while not self._accepts():  # the file exists from bind(), connections from listen()
            assert self.proc.poll() is None and time.monotonic() < deadline, "socat did not start"
            time.sleep(0.05)

    def _accepts(self) -> bool:
        """Whether socat is listening: a connect succeeds (it then forwards and closes it). The
        socket's file alone is not enough: between socat's bind and listen a client is refused,
        which failed test_node_engine_cut.py once in CI ("Connection refused" after start)."""
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.path))
            except OSError:
                return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            self.proc = None
        self.path.unlink(missing_ok=True)


def served(docker_host: str, path: Path) -> Iterator[EngineProxy]:
    """A started proxy for a fixture (skips when the engine is not on a unix socket)."""
    if not docker_host.startswith("unix://"):
        pytest.skip("the engine is not on a unix socket")
    p = EngineProxy(path, docker_host.removeprefix("unix://"))
    p.start()
    try:
        yield p
    finally:
        p.stop()
