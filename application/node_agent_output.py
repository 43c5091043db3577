"""What a node daemon sends of its members besides their phases (``NodeAgent``'s part): the
manifest of a member's outputs when it exits 0, and again on request (``tp artifacts verify``),
one of its output files on request (a download), its live output while it runs and its final
log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from application.node_live_output import ship_final_log, ship_live_output
from application.node_outputs import scan_member
from domain.artifact_ports import OutputCourier, OutputStorage
from domain.artifacts import Manifest
from domain.errors import NotFound, TunePlaneError
from domain.node_daemon_ports import JournalEntry, MemberRuntime
from domain.node_messages import FetchOutput, OutputsScanned, PrepareOrder, ScanOutputs
from domain.node_protocol import LIVE_PHASES

log = logging.getLogger("tuneplane.node")


class MemberOutput:
    node: str
    runtime: MemberRuntime
    outputs: OutputStorage | None
    log_limit: int
    flush_seconds: float
    courier: OutputCourier | None
    _scans: dict[str, asyncio.Task[None]]  # scans and fetches being answered, by request id
    _followers: dict[str, asyncio.Task[None]]
    _say: Callable[[Any], Awaitable[None]]

    # -- outputs (artifacts) ----------------------------------------------------------------

    async def _scan(self, order: PrepareOrder) -> Manifest | None:
        manifest, why = await scan_member(self.outputs, self.node, order.job_id, order.ref)
        if why:
            log.error("outputs of member %s are not recorded: %s", order.ref.member_id, why)
        return manifest

    def start_scan(self, request: ScanOutputs | FetchOutput) -> None:
        """Answer ``request`` in the background (hashing or sending may take a while), once:
        the gateway sends an unanswered request again while the first answer is under way."""
        rid = request.request_id
        if rid in self._scans:
            return
        answer = (
            self.on_scan(request) if isinstance(request, ScanOutputs) else self.on_fetch(request)
        )
        task = asyncio.create_task(answer)
        self._scans[rid] = task
        task.add_done_callback(lambda _: self._scans.pop(rid, None))

    async def on_scan(self, request: ScanOutputs) -> None:
        """Hash a member's output directory again and answer (``tp artifacts verify``)."""
        found, why = await scan_member(self.outputs, self.node, request.job_id, request.ref)
        await self._say(OutputsScanned(request.request_id, request.ref, found, why[:4000]))

    async def on_fetch(self, request: FetchOutput) -> None:
        """Send one recorded output file to the gateway (a download), or why it cannot: the
        file is opened without following links below the member's directory, and the gateway
        checks its content against the manifest (a file changed since is refused there)."""
        if self.courier is None:
            log.error(
                "output file request %s: no way to the gateway's file calls", request.request_id
            )
            return
        file, ref, content, why = request.file, request.ref, None, ""
        try:
            if self.outputs is None:
                raise NotFound(
                    f"node {self.node} keeps no outputs (its daemon runs without an outputs root)"
                )
            size, content = await self.outputs.open(
                request.job_id, ref.attempt_id, ref.index, file.path
            )
            if size != file.size:
                why = f"{file.path} is {size} bytes now, {file.size} when its member completed"
        except (OSError, TunePlaneError) as exc:
            why = f"{file.path} cannot be read on node {self.node}: {exc}"
        try:
            await self.courier.put_output(request.request_id, None if why else content, why)
        except TunePlaneError as exc:  # the request lapsed or was answered, or the link is down
            log.warning("output file request %s not answered: %s", request.request_id, exc)
        finally:
            if content is not None:
                await content.aclose()

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

    async def _ship_log(self, entry: JournalEntry) -> None:
        cid = entry.container_id
        await ship_final_log(self.runtime, entry.order.ref, cid, self._say, self.log_limit)
