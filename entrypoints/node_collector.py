"""The node daemon's collector: `tp collector` as a child process of `tp node run`.

The collector is a separate process (a crash of either leaves the other running until the
kernel's parent-death signal ends the collector; its spool is durable, so nothing is lost), and
the daemon starts it again when it exits, after a pause that doubles up to a minute. It reads
the member files the daemon writes (adapters/node/collector_feed.py) and ships to the telemetry
gateway with the members' tokens; it never sees the node's control credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from pathlib import Path

log = logging.getLogger("tuneplane.node")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class CollectorProcess:
    def __init__(
        self, root: Path, gateway: str, ca: Path, *, server_name: str | None = None
    ) -> None:
        self.root = root
        self.args = [
            sys.executable, "-m", "entrypoints.cli.main", "collector",
            "--spool", str(root / "spool"),
            "--members", str(root / "members"),
            "--gateway", gateway,
            "--ca", str(ca),
        ]  # fmt: skip
        if server_name:
            self.args += ["--server-name", server_name]
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def run(self) -> None:
        """Keep the collector running until cancelled; then stop it (SIGTERM, then SIGKILL)."""
        pause = 1.0
        log_path = self.root / "collector.log"
        try:
            while True:
                out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    self.proc = await asyncio.create_subprocess_exec(
                        *self.args,
                        stdout=out,
                        stderr=out,
                        stdin=asyncio.subprocess.DEVNULL,
                        preexec_fn=_die_with_parent,
                    )
                finally:
                    os.close(out)
                self.starts += 1
                code = await self.proc.wait()
                log.warning(
                    "the collector exited with %s (see %s); starting it again in %.0f s",
                    code,
                    log_path,
                    pause,
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 60.0)
        finally:
            await self.stop()

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
