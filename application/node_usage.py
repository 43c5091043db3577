"""Where the node's running members' CPU and memory use can be read, for its collector
(``MemberRuntime.usage_source``; the member files carry it: docs/telemetry.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from domain.errors import TunePlaneError
from domain.node_daemon_ports import JournalEntry, MemberRuntime
from domain.node_protocol import Phase
from domain.telemetry import UsageSource

log = logging.getLogger("tuneplane.node")


class MemberUsage:
    """The runtime is asked once per running container whose member is collected (again at
    the next look while it answers None or cannot answer); what it said is forgotten when the
    member stops running or its container changes."""

    def __init__(self, runtime: MemberRuntime) -> None:
        self.runtime = runtime
        self._known: dict[str, tuple[str, UsageSource]] = {}  # member → (container, source)

    async def of(self, entries: Sequence[JournalEntry]) -> dict[str, UsageSource]:
        running = {
            e.member_id: e.container_id
            for e in entries
            if e.phase is Phase.RUNNING
            and e.container_id
            and (e.order.collector_token or e.order.collector_token_expires_at)
        }
        for mid in [m for m, (cid, _) in self._known.items() if running.get(m) != cid]:
            del self._known[mid]
        for mid, cid in running.items():
            if mid in self._known or cid is None:
                continue
            try:
                found = await self.runtime.usage_source(cid)
            except TunePlaneError as exc:
                log.warning("member %s: where its use can be read is unknown: %s", mid, exc)
                continue
            if found is not None:
                self._known[mid] = (cid, found)
        return {mid: source for mid, (_, source) in self._known.items()}
