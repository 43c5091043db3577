"""The node daemon's use cases: obey the gateway's commands, keep the journal, report.

Every change is journalled (durably) before it is acted on or reported, so a daemon killed at
any point finds on restart (``recover``) what it was doing: a member caught preparing is rolled
back and refused, a started one is re-adopted from the container engine, never started again.
That recovery changes the engine and the journal, so it waits for the gateway's Welcome: a
daemon the gateway refuses (a second one of the node: a restored backup of its state directory,
a copied credential) changes nothing. Before the Welcome the daemon only looks (``hello``).
Nothing starts without a Commit, and a Prepare or Commit from before the node's last fencing
epoch is refused; Abort, Stop and Forget are always obeyed. The connection is not needed to
keep members running: while it is down the daemon keeps watching and journalling, and the
Hello of the next stream carries the whole journal and a full scan of the engine, every
labelled container the journal lacked re-adopted after the Welcome, then said again in an
Inventory when that changed what the Hello said (``application/node_adoption.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from application import log_context
from application.journal_io import journal_call
from application.node_adoption import adopt, learn_installation, listing, survey
from application.node_agent_base import collected, ids_of
from application.node_prepare import MemberPrepare
from domain.errors import Unavailable
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import Hello, Inventory, PrepareOrder, TokenRenewal
from domain.node_protocol import (
    LIVE_PHASES,
    Command,
    CommandKind,
    EngineScan,
    MemberReport,
    NodeCapacity,
    Phase,
)

log = logging.getLogger("tuneplane.node")

Told = tuple[EngineScan, tuple[MemberReport, ...]]  # a Hello's scan and journal


class NodeAgent(MemberPrepare):
    # whether the gateway accepted this process's current stream (its Welcome): until then the
    # daemon changes nothing in the engine or the journal (it may be refused as a second daemon)
    accepted = False
    told: Told | None = None  # what the last Hello said

    # -- start-up and connection --------------------------------------------------------------

    async def recover(self, report: bool = False) -> bool:
        """Reconcile the journal with the engine after a (re)start, once the gateway accepted
        the session (``welcomed``). False when it cannot yet (the installation is not known,
        the engine does not answer): the next scan tries again. InvalidInput when the journal
        belongs to another engine."""
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

    async def _rescan(self, told: Told | None = None) -> None:
        """Scan (and reconcile) again, the session accepted; send the result when the scan
        completes, unless it is what the Hello said (``told``)."""
        scan = await self.scan(report=True)
        if not scan.complete:
            return  # ``watch_once`` makes it again
        entries = await journal_call(self.journal, self.journal.entries)
        if told is not None and told == (scan, tuple(self.said(e) for e in entries)):
            return
        # the gateway refused what this node said of its members while it could not name
        # its engine (final logs too), or the Hello's journal was not reconciled yet: the exits
        # go pending in the Inventory, then each exited member's log again, then its exit
        # (docs/node-backend.md#logs)
        self.view += 1
        await self._say(Inventory(scan, tuple(self.said(e) for e in entries)))
        for e in entries:
            if e.phase is Phase.EXITED:
                await self._exited(e.member_id)

    async def hello(self, capacity: NodeCapacity, address: str, version: str) -> Hello:
        """The first message of a new stream: the journal as it is and what the engine holds,
        changing neither (the gateway may refuse this session: another daemon of the node may
        hold it, on the same engine). Every exit in it is ``log_pending`` (its final log goes
        over this stream after the Welcome, then the exit again)."""
        self.view += 1  # before anything awaits: what is sent from here is this stream's
        self.accepted = False
        scan = await survey(self)
        entries = await journal_call(self.journal, self.journal.entries)
        epoch = await journal_call(self.journal, self.journal.epoch)
        said = tuple(self.said(e) for e in entries)
        self.told = (scan, said)
        return Hello(self.node, capacity, address, version, epoch, said, scan)

    async def welcomed(self, epoch: int, installation: str = "") -> None:
        """The stream is up (the gateway accepted the session): keep the installation and the
        epoch; reconcile the journal with the engine (the first time: ``recover``; else what
        the Hello's scan left to re-adopt), before any order, and send an Inventory if that
        changed what the Hello said; then send the final log of each exited member, then its
        exit (the Hello said it ``log_pending``: the gateway ends it only now, its log stored
        first; storing a log again is harmless)."""
        self.installation = await learn_installation(self.journal, self.node, installation)
        self.accepted = True
        current = await journal_call(self.journal, self.journal.epoch)
        if epoch > current:
            await journal_call(self.journal, self.journal.set_epoch, epoch)
        elif epoch < current:
            log.warning("welcomed with epoch %d, lower than the journal's %d", epoch, current)
        told, self.told = self.told, None
        if not self.recovered or told is None or not told[0].complete:
            await self._rescan(told)
        for e in await journal_call(self.journal, self.journal.entries):
            if e.phase is Phase.EXITED:
                await self._exited(e.member_id)
            elif e.phase in LIVE_PHASES:
                self._follow(e, restart=True)  # pieces lost while disconnected: send again

    async def _exited(self, member_id: str) -> None:
        """Its final log over this stream (unless it went already), then its exit."""
        async with self.lock(member_id):
            e = await self.entry(member_id)
            if e is None or e.phase is not Phase.EXITED:
                return  # forgotten meanwhile
            if not self.log_sent(e):
                await self._send_log(e)
            await self._say(self.said(e))

    # -- commands -----------------------------------------------------------------------------

    async def on_command(self, command: Command, grace: float = 10.0) -> None:
        """Obey ``command``. One the engine cannot carry out now (it does not answer) is left
        undone, not failed, and the control stream goes on: the gateway says it again while
        the member's phase has not moved."""
        entry = await self.entry(command.ref.member_id)
        ids = ids_of(entry.order) if entry else log_context.bound(member=command.ref.index)
        with ids:
            try:
                await self._on_command(command, grace)
            except Unavailable as exc:
                log.warning("%s of %s deferred: %s", command.kind, command.ref.member_id, exc)

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
            if entry is None or entry.order.ref != renewal.ref or not collected(entry.order):
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
            await self._say(self.said(entry))  # already started (or gone): say so again
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
        self._logs_on.pop(member_id, None)
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

    # -- watching -----------------------------------------------------------------------------

    async def watch_once(self) -> None:
        """Observe every started member; journal and report what changed. After a scan that
        could not complete, scan again and send the result with the whole journal. Nothing
        before the gateway first accepted a session (the journal is not reconciled yet)."""
        incomplete = not (self.last_scan and self.last_scan.complete)
        if self.accepted and self.installation is not None and incomplete:
            await self._rescan()
        if not self.recovered:
            return
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
