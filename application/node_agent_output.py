"""What a node daemon sends of its members besides their phases (``NodeAgent``'s part): the
manifest of a member's outputs when it exits 0, and again on request (``tp artifacts verify``),
its live output while it runs and its final log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from application.node_live_output import ship_final_log, ship_live_output
from application.node_outputs import scan_member
from domain.artifact_ports import OutputStorage
from domain.artifacts import Manifest
from domain.node_messages import OutputsScanned, PrepareOrder, ScanOutputs
from domain.node_ports import JournalEntry, MemberRuntime
from domain.node_protocol import LIVE_PHASES

log = logging.getLogger("tuneplane.node")


class MemberOutput:
    node: str
    runtime: MemberRuntime
    outputs: OutputStorage | None
    log_limit: int
    flush_seconds: float
    _scans: set[asyncio.Task[None]]
    _followers: dict[str, asyncio.Task[None]]
    _say: Callable[[Any], Awaitable[None]]

    # -- outputs (artifacts) ----------------------------------------------------------------

    async def _scan(self, order: PrepareOrder) -> Manifest | None:
        manifest, why = await scan_member(self.outputs, self.node, order.job_id, order.ref)
        if why:
            log.error("outputs of member %s are not recorded: %s", order.ref.member_id, why)
        return manifest

    def start_scan(self, request: ScanOutputs) -> None:
        """Answer ``request`` in the background (hashing may take a while)."""
        task = asyncio.create_task(self.on_scan(request))
        self._scans.add(task)
        task.add_done_callback(self._scans.discard)

    async def on_scan(self, request: ScanOutputs) -> None:
        """Hash a member's output directory again and answer (``tp artifacts verify``)."""
        found, why = await scan_member(self.outputs, self.node, request.job_id, request.ref)
        await self._say(OutputsScanned(request.request_id, request.ref, found, why[:4000]))

    # -- live output ----------------------------------------------------------------------

    def _follow(self, entry: JournalEntry, restart: bool = False) -> None:
        """Make sure the member's live output is being sent (from the start if ``restart``)."""
        current = self._followers.get(entry.member_id)
        if current is not None and not current.done():
            if not restart:
                return
            current.cancel()
        if entry.container_id and entry.phase in LIVE_PHASES:
            ship = ship_live_output(
                self.runtime,
                entry.order.ref,
                entry.container_id,
                self._say,
                self.log_limit,
                self.flush_seconds,
            )
            self._followers[entry.member_id] = asyncio.create_task(ship)

    async def _send_log(self, entry: JournalEntry, cid: str) -> None:
        await ship_final_log(self.runtime, entry.order.ref, cid, self._say, self.log_limit)
