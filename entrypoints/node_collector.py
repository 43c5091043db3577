"""The node daemon's collector: `tp collector` as a child process of `tp node run`.

The collector is a separate process (a crash of either leaves the other running until the
kernel's parent-death signal ends the collector; its spool is durable, so nothing is lost), kept
running by the daemon through ``entrypoints.supervise`` (each exit logged with its status, started
again after a pause that doubles up to a minute and resets after a healthy run). It reads the
member files the daemon writes (adapters/node/collector_feed.py) and ships to the telemetry
gateway with the members' tokens; it never sees the node's control credential.
"""

from __future__ import annotations

import sys
from pathlib import Path

from entrypoints.supervise import Process, Supervisor, spawn_logged


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
        self.log_path = root / "collector.log"
        self.supervisor = Supervisor(
            "the collector", self._spawn, log_path=self.log_path, pid_file=root / "collector.pid"
        )

    async def _spawn(self) -> Process:
        return await spawn_logged(self.args, self.log_path)

    @property
    def proc(self) -> Process | None:
        return self.supervisor.proc

    @property
    def starts(self) -> int:
        return self.supervisor.starts

    async def run(self) -> None:
        """Keep the collector running until cancelled; then stop it (SIGTERM, then SIGKILL)."""
        await self.supervisor.run()

    async def stop(self) -> None:
        await self.supervisor.stop()
