"""The node daemon's use cases: obey the gateway's commands, keep the journal, report.

Every change is journalled (durably) before it is acted on or reported, so a daemon killed at
any point finds on restart (``recover``) what it was doing: a member caught preparing is rolled
back and refused, a started one is re-adopted from the container engine, never started again.
Nothing starts without a Commit, and a Prepare or Commit from before the node's last fencing
epoch is refused; Abort, Stop and Forget are always obeyed. The connection is not needed to
keep members running: while it is down the daemon keeps watching and journalling, and the
Hello of the next stream carries the whole journal and a full scan of the engine, every
labelled container the journal lacked re-adopted first (``application/node_adoption.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from application import log_context
from application.journal_io import journal_call
from application.node_adoption import adopt, learn_installation, listing
from application.node_agent_output import MemberOutput
from application.node_checkpoint_carrier import CheckpointCarrier
from application.node_sources import SourceArchives
from application.node_usage import MemberUsage
from domain.artifact_ports import OutputCourier, OutputStorage
from domain.errors import TunePlaneError, Unavailable
from domain.node_messages import (
    Hello,
    Inventory,
    LogChunk,
    OutputsScanned,
    PrepareOrder,
    Progress,
    SourceChunk,
    TokenRenewal,
    Vote,
)
from domain.node_ports import (
    JournalEntry,
    MemberJournal,
    MemberRuntime,
    MetricsFeed,
)
from domain.node_protocol import (
    LIVE_PHASES,
    Command,
    CommandKind,
    EngineScan,
    MemberReport,
    NodeCapacity,
    Phase,
    stale_command,
)
from domain.progress import ended_outside

log = logging.getLogger("tuneplane.node")

Body = Vote | Progress | MemberReport | LogChunk | OutputsScanned | Inventory
Send = Callable[[Body], Awaitable[None]]
_BUSY = frozenset({Phase.PREPARING, Phase.PREPARED, Phase.STARTING, Phase.RUNNING})


class NodeAgent(MemberOutput):
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

    # -- journal helpers (SQLite calls leave the event loop) ----------------------------------

    async def entry(self, member_id: str) -> JournalEntry | None:
        return await journal_call(self.journal, self.journal.get, member_id)

    async def journalled(self, entry: JournalEntry) -> JournalEntry:
        await journal_call(self.journal, self.journal.put, entry)
        return entry

    async def _say(self, body: Body) -> None:
        """Send if connected; a lost message is recovered from the journal at the next Hello."""
        with contextlib.suppress(Exception):
            await self.send(body)

    def lock(self, member_id: str) -> asyncio.Lock:
        return self._locks.setdefault(member_id, asyncio.Lock())

    # -- start-up and connection --------------------------------------------------------------

    async def recover(self, report: bool = False) -> bool:
        """Reconcile the journal with the engine after a (re)start, before connecting. False
        when it cannot yet (the installation is not known, the engine does not answer): the
        next scan tries again. InvalidInput when the journal belongs to another engine."""
        held = await listing(self)
        if held is None:
            return False
        entries = await journal_call(self.journal, self.journal.entries)
        for e in entries:
            cid = e.container_id or held.get(e.member_id)
            if e.phase is Phase.PREPARING:
                if cid:
                    await self.runtime.remove(cid)
                await self.journalled(
                    replace(e, phase=Phase.REFUSED, reason="the daemon restarted while preparing")
                )
            elif e.phase is Phase.PREPARED and cid is None:
                vanished = replace(e, phase=Phase.REFUSED, reason="its container vanished")
                await self.journalled(vanished)
            elif e.phase in LIVE_PHASES:
                await self.observe(e, cid, report=report)
        self.recovered = True
        await adopt(self, held, report)
        await self._feed()
        return True

    async def scan(self, report: bool = False) -> EngineScan:
        """List this node's containers (of its installation) in full, re-adopting every one
        the journal lacks; what was found, or why the list is incomplete."""
        if not self.recovered:
            await self.recover(report)
        elif (held := await listing(self)) is not None:
            await adopt(self, held, report)
        assert self.last_scan is not None
        return self.last_scan

    async def _rescan(self) -> None:
        """Scan again after a scan that could not complete; send the result when it does."""
        scan = await self.scan(report=True)
        if scan.complete:
            entries = await journal_call(self.journal, self.journal.entries)
            await self._say(Inventory(scan, tuple(e.report() for e in entries)))

    async def hello(self, capacity: NodeCapacity, address: str, version: str) -> Hello:
        scan = await self.scan()
        entries = await journal_call(self.journal, self.journal.entries)
        epoch = await journal_call(self.journal, self.journal.epoch)
        return Hello(
            self.node,
            capacity,
            address,
            version,
            epoch,
            tuple(e.report() for e in entries),
            scan,
        )

    async def welcomed(self, epoch: int, installation: str = "") -> None:
        """The stream is up: keep the installation and the epoch, and send the logs of members
        that exited while it was down (storing a log again is harmless)."""
        self.installation = await learn_installation(self.journal, self.node, installation)
        current = await journal_call(self.journal, self.journal.epoch)
        if epoch > current:
            await journal_call(self.journal, self.journal.set_epoch, epoch)
        elif epoch < current:
            log.warning("welcomed with epoch %d, lower than the journal's %d", epoch, current)
        if not self.recovered:  # learnt the installation just now: reconcile before any order
            await self._rescan()
        for e in await journal_call(self.journal, self.journal.entries):
            if e.phase is Phase.EXITED and e.container_id:
                await self._send_log(e, e.container_id)
            elif e.phase in LIVE_PHASES:
                self._follow(e, restart=True)  # pieces lost while disconnected: send again

    # -- commands -----------------------------------------------------------------------------

    async def on_source(self, chunk: SourceChunk) -> None:
        self.sources.add(chunk)

    async def on_prepare(self, order: PrepareOrder) -> None:
        with _ids(order):  # its lines, and its prepare task's, carry the member's ids
            await self._on_prepare(order)

    async def _on_prepare(self, order: PrepareOrder) -> None:
        if self._stale(Command(CommandKind.PREPARE, order.ref), await self._epoch()):
            return
        order = replace(order, installation=self.installation or "")  # in its labels
        mid = order.ref.member_id
        async with self.lock(mid):
            existing = await self.entry(mid)
            if existing is not None:  # a repeated Prepare: say again how it went
                if existing.phase in (Phase.PREPARED, Phase.REFUSED):
                    await self._vote(existing)
                return
            why = self._why_not(order)
            busy = await self._busy(order) if why is None else None
            if busy is not None:  # a passing condition: said, not journalled (a repeat re-asks)
                await self._say(Vote(order.ref, False, busy, busy=True))
                return
            entry = JournalEntry(order, Phase.PREPARING)
            if why is not None:
                refused = replace(entry, phase=Phase.REFUSED, reason=why)
                await self._vote(await self.journalled(refused))
                return
            await self.journalled(entry)
        self._tasks[mid] = asyncio.create_task(self._prepare(entry))

    def _why_not(self, order: PrepareOrder) -> str | None:
        """Why this member cannot run here at all (the launch fails)."""
        if order.node != self.node:
            return f"this Prepare is for node {order.node}; this is node {self.node}"
        if order.source_digest and order.source_digest not in self.sources:
            return f"source archive {order.source_digest} did not arrive intact"
        return None

    async def _busy(self, order: PrepareOrder) -> str | None:
        """Why this member cannot run here *now*, for a passing condition of this node (the
        launch is aborted and the job queued again, with another rendezvous port)."""
        if not order.installation:
            return f"node {self.node} has not learnt its installation yet"
        if not self.recovered:  # a PREPARING row now would be rolled back by the recovery
            why = self.last_scan.reason if self.last_scan else "not tried yet"
            return f"node {self.node} has not reconciled its journal with its engine yet ({why})"
        busy = {
            g: e.member_id
            for e in await journal_call(self.journal, self.journal.entries)
            if e.phase in _BUSY
            for g in e.order.gpu_indices
        }
        for g in order.gpu_indices:
            if g in busy:
                return f"GPU {g} is still held by member {busy[g]}"
        if order.check_port and not self.runtime.port_free(order.check_port):
            return f"rendezvous port {order.check_port} is in use on node {self.node}"
        return None

    async def _prepare(self, entry: JournalEntry) -> None:
        order = entry.order
        if self.checkpoints is not None:  # the checkpoint it resumes from, before the vote
            busy = await self.checkpoints.fetch(order)
            if busy is not None:
                await self._unprepare(entry, busy)
                return
        source = self.sources.get(order.source_digest) if order.source_digest else None
        loop = asyncio.get_running_loop()

        def progress(stage: str, fraction: float, detail: str) -> None:
            body = Progress(order.ref, stage, fraction, detail)
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._say(body)))

        try:
            cid = await self.runtime.prepare(order, source, progress)
        except asyncio.CancelledError:
            raise
        except TunePlaneError as exc:
            refused = replace(entry, phase=Phase.REFUSED, reason=str(exc))
        except Exception as exc:  # an engine surprise: a clear no, never a half-prepared yes
            log.exception("prepare of %s failed", order.ref.member_id)
            refused = replace(entry, phase=Phase.REFUSED, reason=f"prepare failed: {exc}")
        else:
            async with self.lock(order.ref.member_id):
                current = await self.entry(order.ref.member_id)
                if current is None or current.phase is not Phase.PREPARING:
                    await self.runtime.remove(cid)  # aborted or forgotten meanwhile
                    return
                await self._vote(
                    await self.journalled(replace(entry, phase=Phase.PREPARED, container_id=cid))
                )
            return
        async with self.lock(order.ref.member_id):
            current = await self.entry(order.ref.member_id)
            if current is not None and current.phase is Phase.PREPARING:
                await self._vote(await self.journalled(refused))

    async def _unprepare(self, entry: JournalEntry, busy: str) -> None:
        """A busy no after all (not journalled: a repeated Prepare asks again)."""
        mid = entry.order.ref.member_id
        async with self.lock(mid):
            current = await self.entry(mid)
            if current is None or current.phase is not Phase.PREPARING:
                return  # aborted or forgotten meanwhile
            await journal_call(self.journal, self.journal.delete, mid)
            await self._say(Vote(entry.order.ref, False, busy, busy=True))

    async def _vote(self, entry: JournalEntry) -> None:
        await self._say(Vote(entry.order.ref, entry.phase is Phase.PREPARED, entry.reason))

    async def on_command(self, command: Command, grace: float = 10.0) -> None:
        entry = await self.entry(command.ref.member_id)
        ids = _ids(entry.order) if entry else log_context.bound(member=command.ref.index)
        with ids:
            await self._on_command(command, grace)

    async def _on_command(self, command: Command, grace: float) -> None:
        if self._stale(command, await self._epoch()):
            return
        mid = command.ref.member_id
        if command.kind in (CommandKind.ABORT, CommandKind.FORGET):
            task = self._tasks.pop(mid, None)
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        async with self.lock(mid):
            entry = await self.entry(mid)
            if command.kind is CommandKind.FORGET:
                await self._forget(mid, entry)
            elif entry is None:
                return
            elif command.kind is CommandKind.COMMIT:
                await self._commit(entry)
            elif command.kind is CommandKind.ABORT:
                await self._abort(entry, command.reason)
            elif command.kind is CommandKind.STOP and entry.container_id:
                stop = self.runtime.stop(entry.container_id, grace)
                self._tasks[mid] = asyncio.create_task(stop)

    async def on_token(self, renewal: TokenRenewal) -> None:
        """A newer collector token (a long run): journalled, then in its collector's file."""
        mid = renewal.ref.member_id
        async with self.lock(mid):
            entry = await self.entry(mid)
            if entry is None or entry.order.ref != renewal.ref or not _collected(entry.order):
                return  # forgotten, another launch, or no metrics: nothing to renew
            order = replace(
                entry.order,
                collector_token=renewal.token,
                collector_token_expires_at=renewal.expires_at,
            )
            await self.journalled(replace(entry, order=order))
        await self._feed()

    async def _commit(self, entry: JournalEntry) -> None:
        """Start a prepared member, journalled STARTING first. A commit said again to a member
        still STARTING makes the start again (idempotent): the engine may have been unreachable
        the first time, and the member waits, created, for a start nobody else would make."""
        if entry.phase is Phase.STARTING and entry.container_id:
            try:
                await self.observe(entry, entry.container_id, report=True)
            except Unavailable as exc:
                log.warning("start of %s deferred again: %s", entry.member_id, exc)
                return
            current = await self.entry(entry.member_id)
            if current is None or current.phase is not Phase.STARTING:
                return  # it had started (running, exited or gone): now reported
        elif entry.phase is not Phase.PREPARED:
            await self._say(entry.report())  # already started (or gone): say so again
            return
        else:
            entry = await self.journalled(replace(entry, phase=Phase.STARTING))  # first
        cid = entry.container_id
        assert cid is not None  # a prepared member has its container
        await self._say(entry.report())
        try:
            await self.runtime.start(cid)
        except Unavailable as exc:
            log.warning("start of %s deferred: %s", entry.member_id, exc)
            return
        self._follow(entry)

    async def _abort(self, entry: JournalEntry, reason: str) -> None:
        if entry.phase in LIVE_PHASES:
            return  # the gateway stops a started member; an abort never kills one
        if entry.container_id:
            await self.runtime.remove(entry.container_id)
        if entry.phase in (Phase.PREPARING, Phase.PREPARED):
            entry = await self.journalled(replace(entry, phase=Phase.ABORTED, reason=reason))
        await self._say(entry.report())

    async def _forget(self, member_id: str, entry: JournalEntry | None) -> None:
        cid = entry.container_id if entry else self.orphans.pop(member_id, None)
        if cid is None and self.installation is not None:
            cid = (await self.runtime.held(self.installation)).get(member_id)
        if cid:
            await self.runtime.remove(cid)
        if entry is not None:
            await journal_call(self.journal, self.journal.delete, member_id)
            await self._discard_checkpoints(entry.order)
        self._locks.pop(member_id, None)
        if self.feed is not None:
            await asyncio.to_thread(self.feed.forgotten, member_id)
        follower = self._followers.pop(member_id, None)
        if follower is not None:
            follower.cancel()

    async def _discard_checkpoints(self, order: PrepareOrder) -> None:
        """The attempt's checkpoint directories, once no member of it is held here."""
        if self.checkpoints is None:
            return
        held = await journal_call(self.journal, self.journal.entries)
        attempt = (order.job_id, order.attempt)
        if not any((e.order.job_id, e.order.attempt) == attempt for e in held):
            await self.checkpoints.discard(*attempt)

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

    # -- watching -----------------------------------------------------------------------------

    async def watch_once(self) -> None:
        """Observe every started member; journal and report what changed. After a scan that
        could not complete, scan again and send the result with the whole journal."""
        if self.installation is not None and not (self.last_scan and self.last_scan.complete):
            await self._rescan()
        for entry in await journal_call(self.journal, self.journal.entries):
            if entry.phase in LIVE_PHASES:
                async with self.lock(entry.member_id):
                    current = await self.entry(entry.member_id)
                    if current is not None and current.phase in LIVE_PHASES:
                        await self.observe(current, current.container_id, report=True)
                        self._follow(current)
                        if self.checkpoints is not None and current.phase is Phase.RUNNING:
                            o = current.order
                            self.checkpoints.keep_uploading(o.ref, o.job_id, o.attempt)
        await self._feed()

    async def _feed(self) -> None:
        if self.feed is not None:
            entries = await journal_call(self.journal, self.journal.entries)
            usage = await self.usage.of(entries)
            await asyncio.to_thread(self.feed.sync, entries, usage)

    async def observe(self, e: JournalEntry, cid: str | None, *, report: bool) -> None:
        with _ids(e.order):
            await self._observe(e, cid, report=report)

    async def _observe(self, e: JournalEntry, cid: str | None, *, report: bool) -> None:
        obs = await self.runtime.observe(cid) if cid else None
        if obs is None or obs.status == "missing":
            gone = ended_outside("its container is gone from the engine (removed)")
            new = replace(e, phase=Phase.MISSING, reason=gone)
        elif obs.status == "running":
            new = replace(e, phase=Phase.RUNNING, container_id=cid)
        elif obs.status == "exited":
            code = obs.exit_code if obs.exit_code is not None else -1
            new = replace(e, phase=Phase.EXITED, exit_code=code, reason=obs.reason)
        else:
            return  # starting, or the engine cannot say now
        if new == e:
            return
        how = f" with {new.exit_code}" if new.phase is Phase.EXITED else ""
        log.info("member %s %s%s", e.member_id, new.phase, how)
        if new.phase is Phase.EXITED and new.exit_code == 0:
            new = replace(new, outputs=await self._scan(new.order))
        if self.checkpoints is not None and new.phase in (Phase.EXITED, Phase.MISSING):
            o = new.order  # its last checkpoints are kept before its end is said
            await self.checkpoints.finish(o.ref, o.job_id, o.attempt)
        if new.phase is Phase.EXITED and report and cid:
            follower = self._followers.pop(e.member_id, None)
            if follower is not None:  # its last live pieces go before the exit
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(follower), 2)
            await self._send_log(new, cid)  # the log first: it is stored before the exit
        await self.journalled(new)
        if report:
            await self._say(new.report())


def _ids(order: PrepareOrder) -> contextlib.AbstractContextManager[None]:
    """Log lines within carry the member's job id, attempt number and index."""
    return log_context.bound(
        job_id=order.job_id, attempt=order.attempt or None, member=order.ref.index
    )


def _collected(order: PrepareOrder) -> bool:
    """Launched with a collector token (or re-adopted having had one: the token was lost)."""
    return bool(order.collector_token or order.collector_token_expires_at)
