"""`tp collector`: a host's metrics collector (docs/telemetry.md).

Reads the members directory (one 0600 JSON file per member, written by the node daemon), tails
each member's metrics directory into the durable spool and ships it to the telemetry gateway
with the member's token. A member whose file says ``"ended": true`` is read to its end and
shipped; then ``<member>.drained`` is written beside its file and the member is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpclib.client import Channel

from adapters.grpc.telemetry_client import Shipper, Ticket
from adapters.telemetry.spool import Spool
from adapters.telemetry.tailer import MemberTail
from adapters.tls import client_context
from domain.errors import InvalidInput, TunePlaneError
from entrypoints.node_daemon import split_server
from entrypoints.server import run_server, until_signalled

log = logging.getLogger("tuneplane.collector")


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    spool: Path
    members: Path
    gateway: str
    ca: Path
    max_spool_mb: int = 1024
    poll: float = 0.5


@dataclass(frozen=True, slots=True)
class MemberFile:
    job: str
    attempt: str
    member: str
    index: int
    token: str
    metrics_dir: Path
    ended: bool


def read_member_file(path: Path) -> MemberFile:
    """The member file at ``path``; InvalidInput naming what is wrong with it."""
    try:
        body: Any = json.loads(path.read_text())
        return MemberFile(
            job=str(body["job"]),
            attempt=str(body["attempt"]),
            member=str(body["member"]),
            index=int(body["index"]),
            token=str(body["token"]),
            metrics_dir=Path(str(body["metrics_dir"])),
            ended=bool(body.get("ended", False)),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(
            f"member file {path} is unreadable or malformed ({exc!r})",
            fix="the node daemon writes these files: a JSON object with job, attempt, member, "
            "index, token, metrics_dir and ended",
        ) from None


@dataclass
class _Run:
    file: MemberFile
    tail: MemberTail
    shipper: Shipper
    task: asyncio.Task[None]
    finished: bool = False  # read to its end after the member ended


@dataclass
class Collector:
    options: CollectorOptions
    spool: Spool
    channel: Channel
    runs: dict[str, _Run] = field(default_factory=dict)
    _complained: dict[Path, float] = field(default_factory=dict)

    def scan(self) -> dict[str, MemberFile]:
        found: dict[str, MemberFile] = {}
        for path in sorted(self.options.members.glob("*.json")):
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            try:
                f = read_member_file(path)
            except TunePlaneError as exc:
                if self._complained.get(path) != mtime:  # once per version of the file
                    log.error("%s (fix: %s)", exc.message, exc.fix)
                    self._complained[path] = mtime
                continue
            if (self.options.members / f"{f.member}.drained").exists():
                continue
            found[f.member] = f
        return found

    async def step(self) -> None:
        files = self.scan()
        for member, f in files.items():
            run = self.runs.get(member)
            if run is None:
                self._start(f)
            else:
                run.shipper.new_token(f.token)
                run.file = f
        for member in [m for m in self.runs if m not in files]:
            await self._stop(member)  # its file is gone: the daemon let it go
        for member, run in list(self.runs.items()):
            if run.finished:
                await self._maybe_drained(member, run)
                continue
            read = await asyncio.to_thread(run.tail.poll, final=run.file.ended)
            if run.file.ended and read == 0:
                run.finished = True

    def _start(self, f: MemberFile) -> None:
        tail = MemberTail(f.member, f.metrics_dir, self.spool)
        shipper = Shipper(self.channel, self.spool, Ticket(f.attempt, f.member, f.token))
        task = asyncio.create_task(shipper.run())
        self.runs[f.member] = _Run(f, tail, shipper, task)
        log.info("collecting member %s from %s", f.member, f.metrics_dir)

    async def _maybe_drained(self, member: str, run: _Run) -> None:
        pending = await asyncio.to_thread(self.spool.pending, member)
        if pending and run.shipper.refused is None:
            return
        if pending:  # refused for good: its attempt ended too long ago
            self.spool.count(member, "dropped_records", pending)
            log.error("member %s: %d records not shipped (%s)", member, pending,
                      run.shipper.refused)  # fmt: skip
        await self._stop(member)
        await asyncio.to_thread(self.spool.forget, member)
        marker = self.options.members / f"{member}.drained"
        marker.write_text("")
        log.info("member %s collected to its end", member)

    async def _stop(self, member: str) -> None:
        run = self.runs.pop(member)
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run.task
        run.tail.close()

    async def run(self) -> None:
        while True:
            await self.step()
            await asyncio.sleep(self.options.poll)

    async def close(self) -> None:
        for member in list(self.runs):
            await self._stop(member)


async def serve_collector(options: CollectorOptions) -> None:
    host, port = split_server(options.gateway, "--gateway", "the telemetry gateway", 8472)
    if not options.members.is_dir():
        raise InvalidInput(
            f"--members {options.members} is not a directory",
            fix="pass the directory where the node daemon writes member files",
            field="members",
        )
    spool = Spool(options.spool, max_bytes=options.max_spool_mb * 1024 * 1024)
    channel = Channel(host, port, ssl=client_context(options.ca))
    collector = Collector(options, spool, channel)
    print(f"collector: members {options.members}, spool {options.spool}, gateway {host}:{port}",
          flush=True)  # fmt: skip
    try:
        await until_signalled(collector.run())
    finally:
        await collector.close()
        channel.close()
        spool.close()


def run_collector(options: CollectorOptions) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        run_server(serve_collector(options))
    except TunePlaneError as exc:
        print(f"error: {exc.message}" + (f"\nfix: {exc.fix}" if exc.fix else ""), flush=True)
        return 1
    return 0
