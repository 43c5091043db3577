"""The collector's core (docs/telemetry.md): one poll reads the members directory (one 0600
JSON file per member, written by the node daemon), tails each member's metrics directory into
the durable spool and keeps a shipper per member streaming it to the telemetry gateway with the
member's token. The process around it is `tp collector` (``entrypoints/collector.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpclib.client import Channel

from adapters.grpc.telemetry_client import MAX_PAUSE, Shipper, Ticket
from adapters.telemetry.spool import Spool
from adapters.telemetry.system import SystemSampler, Target
from adapters.telemetry.tailer import PER_POLL, MemberTail, Progress
from application import instruments as i
from application import log_context
from application.instruments import NO_INSTRUMENTS, Instruments
from domain.errors import InvalidInput, TunePlaneError
from domain.telemetry import SYSTEM_SOURCE, UsageSource

log = logging.getLogger("tuneplane.collector")

DEFAULT_SPOOL_MB = 2048


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    spool: Path
    members: Path
    gateway: str
    ca: Path
    server_name: str | None = None
    max_spool_mb: int = DEFAULT_SPOOL_MB
    poll: float = 0.5
    ignore_term: bool = False  # only SIGINT stops it (a Slurm member's: docs/slurm.md)
    gpu_sample_seconds: float = 5.0  # the system source's period (TUNEPLANE_GPU_SAMPLE_SECONDS)
    retry_max: float = MAX_PAUSE  # most seconds between two sends (COLLECTOR_RETRY_MAX_SECONDS)


@dataclass(frozen=True, slots=True)
class MemberFile:
    job: str
    attempt: str
    member: str
    index: int
    token: str
    metrics_dir: Path
    ended: bool
    gpus: tuple[int, ...] = ()  # the host's indices of its GPUs, in its own order (cuda:i)
    usage: UsageSource | None = None  # where its CPU and memory use is read (once it runs)


_FIELDS = (
    "job, attempt, member (the file's name), index, token, metrics_dir and ended (and "
    "optionally gpus and usage)"
)
MAX_GPUS = 256


def read_member_file(path: Path) -> MemberFile:
    """The member file at ``path``; InvalidInput naming the file and what is wrong with it."""

    def bad(what: str) -> InvalidInput:
        return InvalidInput(
            f"member file {path}: {what}",
            fix=f"the node daemon writes these files: a JSON object with {_FIELDS}; remove a "
            "file written by anything else",
        )

    try:
        body: Any = json.loads(path.read_bytes())
    except OSError as exc:
        raise bad(f"cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise bad(f"is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise bad("is not a JSON object")
    for key in ("job", "attempt", "member", "token", "metrics_dir"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise bad(f'"{key}" must be a non-empty string')
    index, ended = body.get("index"), body.get("ended", False)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise bad('"index" must be an integer >= 0')
    if not isinstance(ended, bool):
        raise bad('"ended" must be true or false')
    if body["member"] != path.stem:
        raise bad(f'"member" is {body["member"]!r}, but the file is named {path.name}')
    if not os.path.isabs(body["metrics_dir"]):
        raise bad(f'"metrics_dir" {body["metrics_dir"]!r} is not an absolute path')
    gpus = body.get("gpus", [])
    if (
        not isinstance(gpus, list)
        or len(gpus) > MAX_GPUS
        or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < 2**31 for g in gpus)
        or len(set(gpus)) != len(gpus)
    ):
        raise bad('"gpus" must be a list of distinct GPU indices (integers >= 0)')
    return MemberFile(
        body["job"], body["attempt"], body["member"], index, body["token"],
        Path(body["metrics_dir"]), ended, tuple(gpus), _usage(body.get("usage"), bad),
    )  # fmt: skip


def _usage(raw: Any, bad: Callable[[str], InvalidInput]) -> UsageSource | None:
    if raw is None:
        return None
    what = '"usage" must be null or {"pid": null or an integer > 0, "cgroups": [absolute paths]}'
    if not isinstance(raw, dict):
        raise bad(what)
    pid, cgroups = raw.get("pid"), raw.get("cgroups", [])
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise bad(what)
    if not isinstance(cgroups, list) or len(cgroups) > 8:
        raise bad(what)
    for c in cgroups:
        if not isinstance(c, str) or not os.path.isabs(c) or "\0" in c or ".." in c.split("/"):
            raise bad(what)
    return UsageSource(pid, tuple(cgroups))


def _ids(f: MemberFile) -> contextlib.AbstractContextManager[None]:
    """Log lines within carry the member's job id and index (docs/operations.md#logs)."""
    return log_context.bound(job_id=f.job, member=f.index)


@dataclass
class _Run:
    file: MemberFile
    tail: MemberTail
    shipper: Shipper
    task: asyncio.Task[None]
    caught_up: bool = False  # ended, and every source was read to its end


DEPTH_EVERY = 5.0  # seconds between two readings of the spool's depth


@dataclass
class Collector:
    options: CollectorOptions
    spool: Spool
    channel: Channel
    sampler: SystemSampler | None = None  # the members' system source (GPUs, CPU, memory)
    runs: dict[str, _Run] = field(default_factory=dict)
    _complained: dict[Path, tuple[float, int]] = field(default_factory=dict)
    _drained: set[str] = field(default_factory=set)  # marker written, spool forgotten
    _polling: asyncio.Future[dict[str, Progress]] | None = None
    instruments: Instruments = NO_INSTRUMENTS
    _shipped: dict[str, int] = field(default_factory=dict)  # points acknowledged, counted
    _depth_read: float = -DEPTH_EVERY

    def scan(self) -> dict[str, MemberFile]:
        found: dict[str, MemberFile] = {}
        for path in sorted(self.options.members.glob("*.json")):
            try:
                st = path.stat()
                f = read_member_file(path)
            except OSError:
                continue  # removed while listed
            except TunePlaneError as exc:
                version = (st.st_mtime, st.st_size)
                if self._complained.get(path) != version:  # once per version of the file
                    log.error("%s (fix: %s)", exc.message, exc.fix)
                    self._complained[path] = version
                continue
            self._complained.pop(path, None)
            if (self.options.members / f"{f.member}.drained").exists():
                if f.member not in self.runs and f.member not in self._drained:
                    self.spool.forget(f.member)  # a restart between the marker and forgetting
                    if self.sampler is not None:
                        self.sampler.forget(f.member, remove=True)
                    self._drained.add(f.member)
                continue
            found[f.member] = f
        return found

    async def step(self) -> bool:
        """One poll of every member; True when a member had more than a poll reads (a burst
        of metrics, a collector catching up): then the next poll comes at once."""
        files = self.scan()
        for member, f in files.items():
            run = self.runs.get(member)
            if run is None:
                self._start(f)
            else:
                run.shipper.new_token(f.token)
                run.file = f
        for member in [m for m in self.runs if m not in files]:
            log.info("member %s: its member file is gone; collecting it stops", member)
            await self._stop(member)
        runs = {m: r for m, r in self.runs.items() if not r.caught_up}
        self._polling = asyncio.ensure_future(asyncio.to_thread(self._poll, runs))
        progress = await asyncio.shield(self._polling)
        for member, p in progress.items():
            run = runs[member]
            if p.read:
                run.shipper.wake()
            run.caught_up = run.file.ended and not p.behind
        for member, run in list(self.runs.items()):
            if run.file.ended and (run.caught_up or run.shipper.refused):
                with _ids(run.file):
                    await self._maybe_drained(member, run)
        self._measure(progress)
        return any(p.read >= PER_POLL and p.behind for p in progress.values())

    def _measure(self, progress: dict[str, Progress]) -> None:
        """The collector's gauges after a poll (docs/operations.md#metrics)."""
        measure = self.instruments
        measure.set(i.COLLECTOR_MEMBERS, len(self.runs))
        measure.set(i.COLLECTOR_LAG_BYTES, sum(p.lag for p in progress.values()))
        measure.set(i.SPOOL_BYTES, self.spool.bytes)
        for member, run in self.runs.items():
            self._count_shipped(member, run)

    def _count_shipped(self, member: str, run: _Run) -> None:
        shipped = run.shipper.shipped
        delta = shipped - self._shipped.get(member, 0)
        if delta > 0:
            self.instruments.inc(i.COLLECTOR_SHIPPED, delta)
        self._shipped[member] = shipped

    def _poll(self, runs: dict[str, _Run]) -> dict[str, Progress]:
        """A system sample of the live members when one is due, then every member's new bytes
        into the spool (in a worker thread)."""
        if self.sampler is not None and self.sampler.due():
            self.sampler.sample(
                [
                    Target(m, r.file.gpus, r.file.usage, r.tail.position(SYSTEM_SOURCE))
                    for m, r in runs.items()
                    if not r.file.ended
                ]
            )
        out = {}
        for member, run in runs.items():
            try:
                out[member] = run.tail.poll(final=run.file.ended)
            except Exception:  # the spool's disk full, a bug: log, keep going, try again
                with _ids(run.file):
                    log.exception("member %s: reading its metrics failed", member)
                out[member] = Progress(behind=True)
        now = time.monotonic()
        if now - self._depth_read >= DEPTH_EVERY:  # a scan of the spool: not at every poll
            self._depth_read = now
            self.instruments.set(i.SPOOL_RECORDS, self.spool.depth())
        return out

    def _start(self, f: MemberFile) -> None:
        extra = {SYSTEM_SOURCE: self.sampler.path(f.member)} if self.sampler else None
        tail = MemberTail(f.member, f.metrics_dir, self.spool, extra=extra)
        ticket = Ticket(f.attempt, f.member, f.token)
        shipper = Shipper(self.channel, self.spool, ticket, max_pause=self.options.retry_max)
        with _ids(f):  # the shipper's task, and its log lines, carry the member's ids
            task = asyncio.create_task(shipper.run())
            log.info("member %s: collecting %s", f.member, f.metrics_dir)
        self.runs[f.member] = _Run(f, tail, shipper, task)

    async def _maybe_drained(self, member: str, run: _Run) -> None:
        if await asyncio.to_thread(run.shipper.settled):
            pending = 0
        elif run.shipper.refused is None:
            return  # still shipping
        else:
            pending = await asyncio.to_thread(self.spool.pending, member)
        if pending:  # the member ended and its token is refused: nothing can ship these
            log.error(
                "member %s ended and the gateway refuses its token (%s): %d spooled records "
                "are given up",
                member,
                run.shipper.refused,
                pending,
            )
        await self._stop(member)
        marker = self.options.members / f"{member}.drained"
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        await asyncio.to_thread(self.spool.forget, member)
        if self.sampler is not None:
            self.sampler.forget(member, remove=True)
        self._drained.add(member)
        log.info("member %s: collected to its end", member)

    async def _stop(self, member: str) -> None:
        run = self.runs.pop(member)
        self._count_shipped(member, run)
        self._shipped.pop(member, None)
        if self.sampler is not None:
            self.sampler.forget(member)
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run.task
        run.tail.close()

    async def run(self) -> None:
        while True:
            more = await self.step()
            await asyncio.sleep(0 if more else self.options.poll)

    async def close(self) -> None:
        if self._polling is not None:  # let a poll in its thread finish its transaction
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._polling
        for member in list(self.runs):
            await self._stop(member)
