"""Phase one of a gang launch on a node (``NodeAgent``'s part): a Prepare is checked (for this
node, its source arrived, its GPUs and rendezvous port free), journalled PREPARING, made by the
runtime (created, never started) and answered by a vote. A passing condition is a busy no, not
journalled, so a repeated Prepare asks again; a lasting one is journalled REFUSED."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from application.journal_io import journal_call
from application.node_agent_base import AgentBase, ids_of, tidy_entry
from domain.errors import TunePlaneError, Unavailable
from domain.node_daemon_ports import JournalEntry
from domain.node_messages import PrepareOrder, Progress, SourceChunk, Vote
from domain.node_protocol import Command, CommandKind, Phase

log = logging.getLogger("tuneplane.node")

_BUSY = frozenset({Phase.PREPARING, Phase.PREPARED, Phase.STARTING, Phase.RUNNING})


class MemberPrepare(AgentBase):
    async def on_source(self, chunk: SourceChunk) -> None:
        self.sources.add(chunk)

    async def on_prepare(self, order: PrepareOrder) -> None:
        """Check, journal and start preparing the member; a no vote at once when it cannot run
        here, or when its Prepare cannot be journalled (a full disk: a busy no, nothing
        journalled, the control stream kept)."""
        with ids_of(order):  # its lines, and its prepare task's, carry the member's ids
            try:
                await self._on_prepare(order)
            except Unavailable as exc:  # the journal cannot be written: nothing was
                log.error("prepare of %s not journalled: %s", order.ref.member_id, exc)
                await self._say(Vote(order.ref, False, exc.message, busy=True))

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
                prepared = replace(entry, phase=Phase.PREPARED, container_id=cid)
                try:
                    prepared = await self.journalled(prepared)
                except Unavailable as exc:  # never a yes the journal does not hold
                    log.error("prepare of %s not journalled: %s", order.ref.member_id, exc)
                    with contextlib.suppress(Unavailable):
                        await self.runtime.remove(cid)
                    await self._forget_preparing(entry)
                    await self._say(Vote(order.ref, False, exc.message, busy=True))
                    return
                await self._vote(prepared)
            return
        async with self.lock(order.ref.member_id):
            current = await self.entry(order.ref.member_id)
            if current is not None and current.phase is Phase.PREPARING:
                try:
                    refused = await self.journalled(refused)
                except Unavailable as exc:  # said all the same; its row stays PREPARING
                    # until the Abort that follows this no is journalled (or a restart)
                    log.error("refusal of %s not journalled: %s", order.ref.member_id, exc)
                await self._vote(tidy_entry(refused))

    async def _forget_preparing(self, entry: JournalEntry) -> None:
        """Take the PREPARING row out again, if the journal can be written at all (else the
        Abort that follows the no takes it, or the next start rolls it back)."""
        try:
            await journal_call(self.journal, self.journal.delete, entry.member_id)
        except Unavailable as exc:
            log.warning("member %s stays PREPARING in the journal: %s", entry.member_id, exc)

    async def _unprepare(self, entry: JournalEntry, busy: str) -> None:
        """A busy no after all (not journalled: a repeated Prepare asks again)."""
        mid = entry.order.ref.member_id
        async with self.lock(mid):
            current = await self.entry(mid)
            if current is None or current.phase is not Phase.PREPARING:
                return  # aborted or forgotten meanwhile
            await self._forget_preparing(entry)
            await self._say(Vote(entry.order.ref, False, busy, busy=True))

    async def _vote(self, entry: JournalEntry) -> None:
        await self._say(Vote(entry.order.ref, entry.phase is Phase.PREPARED, entry.reason))
