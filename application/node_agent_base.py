"""The node daemon's agent, its state and what every part of it uses (``NodeAgent`` is built on
it; ``application/node_prepare.py`` and ``node_agent.py`` hold the orders): journal helpers, one
lock per member, what is said to the gateway, and how a member is observed, journalled and
reported (the same whether the report follows a command, a scan or the periodic watch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

from application import log_context
from application.journal_io import journal_call
from application.node_agent_output import MemberOutput
from application.node_checkpoint_carrier import CheckpointCarrier
from application.node_sources import SourceArchives
from application.node_usage import MemberUsage
from domain.artifact_ports import OutputCourier, OutputStorage
from domain.artifacts import Manifest
from domain.node_daemon_ports import JournalEntry, MemberJournal, MemberRuntime, MetricsFeed
from domain.node_messages import (
    Hello,
    Inventory,
    LogChunk,
    OutputsScanned,
    PrepareOrder,
    Progress,
    Vote,
)
from domain.node_protocol import Command, EngineScan, MemberReport, Phase, stale_command
from domain.progress import ended_outside
from domain.texts import prose

log = logging.getLogger("tuneplane.node")

Body = Vote | Progress | MemberReport | LogChunk | OutputsScanned | Inventory
Send = Callable[[Body], Awaitable[None]]

# the most characters of a text from outside (an engine's error, the OS's) that the daemon
# journals or sends as a reason; the gateway refuses a message with a text over 4,096
MAX_REASON = 2000


def said_text(text: str, limit: int = MAX_REASON) -> str:
    """``text`` as the daemon journals and sends it (``domain.texts.prose``): printable, at
    most ``limit`` characters, the cut marked. An engine may answer an error with a whole HTML
    page, and a NUL would get every Hello of the node refused."""
    return prose(text, limit)


B = TypeVar("B")


def tidy(body: B) -> B:
    """``body`` with every reason in it made :func:`said_text` (what the gateway reads): a
    journal written by an older daemon may hold a reason too long or with a NUL, and one such
    text would get every Hello of the node refused."""
    if isinstance(body, Vote):
        return replace(body, reason=said_text(body.reason))
    if isinstance(body, MemberReport):
        return replace(body, reason=said_text(body.reason))
    if isinstance(body, Progress):
        detail = said_text(body.detail)
        return replace(body, stage=said_text(body.stage, 200), detail=detail)
    if isinstance(body, OutputsScanned):
        return replace(body, error=said_text(body.error))
    if isinstance(body, Inventory):
        members = tuple(tidy(r) for r in body.journal)
        return replace(body, scan=tidy_scan(body.scan), journal=members)
    if isinstance(body, Hello):
        members = tuple(tidy(r) for r in body.journal)
        scan = tidy_scan(body.scan) if body.scan is not None else None
        return replace(body, scan=scan, journal=members)
    return body


def tidy_scan(scan: EngineScan) -> EngineScan:
    return replace(scan, reason=said_text(scan.reason))


def tidy_entry(entry: JournalEntry) -> JournalEntry:
    """``entry`` with its reason as it may be journalled (:func:`said_text`)."""
    reason = said_text(entry.reason)
    return entry if reason == entry.reason else replace(entry, reason=reason)


class AgentBase(MemberOutput):
    def __init__(
        self,
        node: str,
        journal: MemberJournal,
        runtime: MemberRuntime,
        send: Send,
        *,
        log_limit: int = 16 * 1024 * 1024,
        sources_kept: int = 4,
        feed: MetricsFeed | None = None,
        outputs: OutputStorage | None = None,
        checkpoints: CheckpointCarrier | None = None,
        courier: OutputCourier | None = None,
    ) -> None:
        self.node = node
        self.journal = journal
        self.runtime = runtime
        self.send = send
        self.log_limit = log_limit
        self.sources = SourceArchives(sources_kept)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.refused = 0  # commands refused as stale or misrouted
        self.orphans: dict[str, str] = {}  # containers of this node that cannot be re-adopted
        # the control plane this node belongs to: labels its containers (None: not learnt yet)
        self.installation: str | None = journal.meta("installation")
        self.engine = ""  # the container engine's identity, once read
        self.recovered = False  # the journal was reconciled with the engine since the start
        self.last_scan: EngineScan | None = None
        self._followers: dict[str, asyncio.Task[None]] = {}  # live output, per member
        self.flush_seconds = 0.5
        self.feed = feed  # tells the host's collector which members to collect
        self.outputs = outputs  # members' output directories on this host (artifacts)
        self._scans: dict[str, asyncio.Task[None]] = {}
        self.courier = courier  # sends an output file the gateway asks for
        self.checkpoints = checkpoints  # attempts' checkpoints, kept through the gateway
        self.usage = MemberUsage(runtime)  # where running members' use is read (collector)
        # how many times this process renewed the gateway's view of its node (a Hello on each
        # new stream, an Inventory: either may change what the gateway accepts), and for each
        # exited member the view its final log last went over whole in: an exit is said as
        # ended (not ``log_pending``) only in the view its log went over in
        # (docs/node-backend.md#logs)
        self.view = 0
        self._logs_on: dict[str, int] = {}

    # -- journal helpers (SQLite calls leave the event loop) ----------------------------------

    async def entry(self, member_id: str) -> JournalEntry | None:
        return await journal_call(self.journal, self.journal.get, member_id)

    async def journalled(self, entry: JournalEntry) -> JournalEntry:
        """``entry`` journalled (durably), its reason bounded and cleaned first (it may be an
        engine's or the OS's text); Unavailable when the journal cannot be written."""
        entry = tidy_entry(entry)
        await journal_call(self.journal, self.journal.put, entry)
        return entry

    async def _say(self, body: Body) -> None:
        """Send if connected; a lost message is recovered from the journal at the next Hello."""
        with contextlib.suppress(Exception):
            await self.send(tidy(body))

    def lock(self, member_id: str) -> asyncio.Lock:
        return self._locks.setdefault(member_id, asyncio.Lock())

    def in_flight(self) -> list[asyncio.Task[None]]:
        """The tasks working on orders now (prepares, stops): the simulator waits for them, or
        cancels them to crash the daemon."""
        return list(self._tasks.values())

    async def close(self) -> None:
        """Stop this process's own tasks (never a member): a prepare cut short stays PREPARING in
        the journal and is refused by ``recover`` at the next start."""
        tasks = [*self._tasks.values(), *self._followers.values(), *self._scans.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.checkpoints is not None:
            await self.checkpoints.close()
        self._tasks.clear()
        self._followers.clear()

    async def _epoch(self) -> int:
        return await journal_call(self.journal, self.journal.epoch)

    def _stale(self, command: Command, epoch: int) -> bool:
        why = stale_command(command, epoch)
        if why is not None:
            self.refused += 1
            log.warning("refused %s: %s", command.kind, why)
        return why is not None

    async def _feed(self) -> None:
        if self.feed is not None:
            entries = await journal_call(self.journal, self.journal.entries)
            usage = await self.usage.of(entries)
            await asyncio.to_thread(self.feed.sync, entries, usage)

    async def observe(self, e: JournalEntry, cid: str | None, *, report: bool) -> None:
        with ids_of(e.order):
            await self._observe(e, cid, report=report)

    async def _observe(self, e: JournalEntry, cid: str | None, *, report: bool) -> None:
        obs = await self.runtime.observe(cid) if cid else None
        if obs is None or obs.status == "missing":
            gone = ended_outside("its container is gone from the engine (removed)")
            new = replace(e, phase=Phase.MISSING, reason=gone)
        elif obs.status == "running":
            new = replace(e, phase=Phase.RUNNING, container_id=cid)
        elif obs.status == "exited":  # its container kept: its final log is read from it
            code = obs.exit_code if obs.exit_code is not None else -1
            new = replace(
                e, phase=Phase.EXITED, exit_code=code, reason=obs.reason, container_id=cid
            )
        else:
            return  # starting, or the engine cannot say now
        new = tidy_entry(new)  # as journalled: an engine's reason bounded and cleaned
        if new == e:
            return
        how = f" with {new.exit_code}" if new.phase is Phase.EXITED else ""
        log.info("member %s %s%s", e.member_id, new.phase, how)
        if new.phase is Phase.EXITED and new.exit_code == 0:
            new = replace(new, outputs=await self._outputs_of(new.order))
        if self.checkpoints is not None and new.phase in (Phase.EXITED, Phase.MISSING):
            o = new.order  # its last checkpoints are kept before its end is said
            await self.checkpoints.finish(o.ref, o.job_id, o.attempt)
        if new.phase is Phase.EXITED and report and cid:
            follower = self._followers.pop(e.member_id, None)
            if follower is not None:  # its last live pieces go before the exit
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(follower), 2)
            await self._send_log(new)  # the log first: it is stored before the exit
        await self.journalled(new)
        if report:
            if new.phase is Phase.EXITED and not self.log_sent(new):
                # a new stream (or Inventory) since: its Welcome may have read the journal
                # before this exit was in it, or the gateway refused the log: again, first
                await self._send_log(new)
            await self._say(self.said(new))

    async def _outputs_of(self, order: PrepareOrder) -> Manifest | None:
        """The manifest of an exited member's outputs, or None (not recorded): never an error,
        whatever the member left there, so that its exit is always journalled and reported."""
        try:
            manifest = await self._scan(order)
        except Exception:
            log.exception("outputs of member %s are not recorded", order.ref.member_id)
            return None
        if manifest is not None and manifest.left_out:
            why = "; ".join(f"{n} file(s): {w}" for w, n in manifest.left_out)
            log.warning(
                "member %s: %d output file(s) left out of its manifest (%s): they cannot be "
                "recorded or downloaded; give them names in UTF-8 without control characters",
                order.ref.member_id, manifest.left_out_count, why,
            )  # fmt: skip
        return manifest

    def log_sent(self, e: JournalEntry) -> bool:
        """The member's final log went whole over the current stream, since its last Hello or
        Inventory."""
        return self._logs_on.get(e.member_id) == self.view

    def said(self, e: JournalEntry) -> MemberReport:
        """``e``'s report as it is said now: an exit whose final log has not gone whole over
        the current stream is ``log_pending`` (the gateway holds it; it is said again after
        the log)."""
        r = tidy(e.report())  # a journal of an older daemon may hold any reason
        if e.phase is Phase.EXITED and not self.log_sent(e):
            return replace(r, log_pending=True)
        return r

    async def _send_log(self, entry: JournalEntry) -> None:
        """Send the member's final log, and note the view it went over whole in (a Hello or
        an Inventory meanwhile moves ``view`` on)."""
        stream = self.view
        await self._ship_log(entry)
        if stream == self.view:
            self._logs_on[entry.member_id] = stream


def ids_of(order: PrepareOrder) -> contextlib.AbstractContextManager[None]:
    """Log lines within carry the member's job id, attempt number and index."""
    return log_context.bound(
        job_id=order.job_id, attempt=order.attempt or None, member=order.ref.index
    )


def collected(order: PrepareOrder) -> bool:
    """Launched with a collector token (or re-adopted having had one: the token was lost)."""
    return bool(order.collector_token or order.collector_token_expires_at)
