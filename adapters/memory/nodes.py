"""In-memory node identity and control links (same contracts as adapters/postgres/nodes.py).

The ``nodes`` table holds ``domain.fleet.Node`` values, which know nothing of the node
backend; a node's fencing epoch and address live beside it in ``node_extras`` (absent: epoch
1, no address — the defaults of the PostgreSQL columns), written under the node's row lock.
A stored ``NodeLink`` carries a placeholder epoch; reads fill in the node's.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from adapters.memory.db import TableDef, Tx
from adapters.memory.node_states import write_moved
from domain.enrollment import JoinToken, NodeCredential
from domain.errors import NotFound
from domain.fleet import Connectivity, Node
from domain.node_events import NodeEvent
from domain.node_ports import NodeLink
from domain.node_protocol import NodeCapacity


@dataclass(frozen=True, slots=True)
class NodeExtraRow:
    """The node backend's columns of a ``nodes`` row."""

    node: str
    epoch: int = 1
    address: str = ""


NODE_TABLES = [
    TableDef("node_extras", pk=lambda r: r.node, immutable=True),
    TableDef("node_links", pk=lambda r: r.node, immutable=True),
    TableDef("node_events", pk=lambda e: (e.node, e.kind, e.source), immutable=True),
    TableDef("join_tokens", pk=lambda t: t.token_hash, immutable=True),
    TableDef(
        "node_credentials",
        pk=lambda c: c.id,
        uniques={"credential_hash": lambda c: c.credential_hash},
        immutable=True,
    ),
    TableDef("launches", pk=lambda p: p.attempt_id, immutable=True),
    TableDef(
        "member_launches",
        pk=lambda m: m.member_id,
        uniques={"index": lambda m: (m.attempt_id, m.index)},
        immutable=True,
    ),
]


def node_extra(tx: Tx, node: str) -> NodeExtraRow:
    found: NodeExtraRow | None = tx.get("node_extras", node)
    return found or NodeExtraRow(node)


def _no_node(node: str) -> NotFound:
    return NotFound(f"node {node} does not exist", fix="see `tp fleet ls`", field="node")


class MemoryEnrollmentRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def add_join_token(self, token: JoinToken) -> None:
        if self._tx.get("pools", token.pool) is None:
            raise NotFound(
                f"pool {token.pool} does not exist", fix="see `tp fleet ls`", field="pool"
            )
        await self._tx.insert("join_tokens", token, "join token")

    async def join_token(self, token_hash: str) -> JoinToken | None:
        found: JoinToken | None = self._tx.get("join_tokens", token_hash)
        return found

    async def use_join_token(self, token_hash: str, node: str, now: datetime) -> bool:
        await self._tx.lock(("join_tokens", "pk", token_hash))  # waits for a racing use
        token: JoinToken | None = self._tx.get("join_tokens", token_hash)
        if token is None or token.used_at is not None or now >= token.expires_at:
            return False
        self._tx.write("join_tokens", replace(token, used_at=now, used_by=node))
        return True

    async def add_credential(self, credential: NodeCredential) -> None:
        if self._tx.get("nodes", credential.node) is None:
            raise _no_node(credential.node)
        await self._tx.insert("node_credentials", credential, f"credential {credential.id}")

    async def credential(self, credential_hash: str) -> NodeCredential | None:
        found: NodeCredential | None = self._tx.find(
            "node_credentials", "credential_hash", credential_hash
        )
        return found

    async def credentials(self, node: str) -> builtins.list[NodeCredential]:
        rows: list[NodeCredential] = self._tx.select("node_credentials", lambda c: c.node == node)
        return sorted(rows, key=lambda c: (c.created_at, c.id))

    async def retire_credentials(self, node: str, keep_id: str, valid_until: datetime) -> None:
        for old in await self.credentials(node):
            if old.id == keep_id:
                continue
            await self._tx.lock(("node_credentials", "pk", old.id))
            c: NodeCredential | None = self._tx.get("node_credentials", old.id)
            if c is not None and (c.valid_until is None or c.valid_until > valid_until):
                self._tx.write("node_credentials", replace(c, valid_until=valid_until))

    async def installation(self) -> str:
        return str(getattr(self._tx.store, "installation", "inst-memory"))


class MemoryNodeLinkRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    def _with_epoch(self, link: NodeLink) -> NodeLink:
        return replace(link, epoch=node_extra(self._tx, link.node).epoch)

    async def open(
        self,
        node: str,
        gateway: str,
        capacity: NodeCapacity,
        address: str,
        daemon_version: str,
        now: datetime,
        peer: str = "",
        instance: str = "",
    ) -> NodeLink:
        tx = self._tx
        await tx.lock(("nodes", "pk", node))  # the node row first, as PostgreSQL does
        current: Node | None = tx.get("nodes", node)
        if current is None:
            raise _no_node(node)
        write_moved(tx, current, now, connectivity=Connectivity.CONNECTED)
        extra = replace(node_extra(tx, node), address=address)
        tx.write("node_extras", extra)
        await tx.lock(("node_links", "pk", node))
        old: NodeLink | None = tx.get("node_links", node)
        session = old.session + 1 if old is not None else 1
        link = NodeLink(
            node, session, gateway, now, now, capacity, address, daemon_version,
            peer=peer, instance=instance,
        )  # fmt: skip
        tx.write("node_links", link)
        return replace(link, epoch=extra.epoch)

    async def current(self, node: str) -> NodeLink | None:
        await self._tx.lock(("nodes", "pk", node))  # as ``open`` and ``close`` do
        return await self.get(node)

    async def close(self, node: str, session: int, now: datetime) -> bool:
        tx = self._tx
        await tx.lock(("nodes", "pk", node))
        link: NodeLink | None = tx.get("node_links", node)
        if link is None or link.session != session:
            return False
        if link.closed_at is None:
            tx.write("node_links", replace(link, closed_at=now))
        current: Node | None = tx.get("nodes", node)
        if current is not None and current.connectivity is Connectivity.CONNECTED:
            write_moved(tx, current, now, connectivity=Connectivity.DISCONNECTED)
        return True

    async def close_all(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        closed = set()
        for node, session in sorted(sessions):
            if await self.close(node, session, now):
                closed.add(node)
        return sorted(closed)

    async def beat(
        self, beats: Sequence[tuple[str, int, datetime]]
    ) -> builtins.list[tuple[str, int]]:
        tx = self._tx
        superseded = []
        for node, session, at in sorted(beats, key=lambda b: b[0]):
            await tx.lock(("node_links", "pk", node))
            link: NodeLink | None = tx.get("node_links", node)
            if link is not None and link.session == session:
                tx.write("node_links", replace(link, heartbeat_at=at))
            elif link is not None and link.session > session:
                superseded.append((node, session))
        return superseded

    async def get(self, node: str) -> NodeLink | None:
        link: NodeLink | None = self._tx.get("node_links", node)
        return self._with_epoch(link) if link is not None else None

    async def all(self) -> builtins.list[NodeLink]:
        rows: list[NodeLink] = self._tx.select("node_links", lambda link: True)
        return [self._with_epoch(link) for link in sorted(rows, key=lambda link: link.node)]

    async def revive(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        tx = self._tx
        revived = []
        for name, session in sorted(sessions):
            await tx.lock(("nodes", "pk", name))
            node: Node | None = tx.get("nodes", name)
            link: NodeLink | None = tx.get("node_links", name)
            if (
                node is not None
                and link is not None
                and link.session == session
                and link.closed_at is None
                and node.connectivity is Connectivity.DISCONNECTED
            ):
                write_moved(tx, node, now, connectivity=Connectivity.CONNECTED)
                revived.append(name)
        return revived

    async def expire(self, older_than: datetime, now: datetime) -> builtins.list[str]:
        tx = self._tx
        silent: list[str] = tx.project(
            "node_links", lambda link: link.heartbeat_at < older_than, lambda link: link.node
        )
        expired = []
        for name in sorted(silent):
            await tx.lock(("nodes", "pk", name))
            node: Node | None = tx.get("nodes", name)
            link: NodeLink | None = tx.get("node_links", name)
            if (
                node is not None
                and link is not None
                and node.connectivity is Connectivity.CONNECTED
                and link.heartbeat_at < older_than
            ):
                write_moved(tx, node, now, connectivity=Connectivity.DISCONNECTED)
                expired.append(name)
        return expired

    async def epoch(self, node: str) -> int:
        if self._tx.get("nodes", node) is None:
            raise _no_node(node)
        return node_extra(self._tx, node).epoch

    async def fence(self, node: str) -> int:
        tx = self._tx
        await tx.lock(("nodes", "pk", node))
        if tx.get("nodes", node) is None:
            raise _no_node(node)
        extra = node_extra(tx, node)
        tx.write("node_extras", replace(extra, epoch=extra.epoch + 1))
        return extra.epoch + 1


class MemoryNodeEventRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def record(self, event: NodeEvent, keep: int) -> NodeEvent:
        tx = self._tx
        await tx.lock(("nodes", "pk", event.node))  # one writer per node: the cap holds
        if tx.get("nodes", event.node) is None:
            raise _no_node(event.node)
        key = (event.node, event.kind, event.source)
        old: NodeEvent | None = tx.get("node_events", key)
        if old is not None:
            event = replace(
                old,
                last_at=max(old.last_at, event.last_at),
                count=old.count + 1,
                message=event.message,
            )
        tx.write("node_events", event)
        for stale in (await self.of_node(event.node, 1 << 30))[keep:]:
            tx.delete("node_events", (stale.node, stale.kind, stale.source))
        return event

    async def of_node(self, node: str, limit: int) -> builtins.list[NodeEvent]:
        rows: list[NodeEvent] = self._tx.select("node_events", lambda e: e.node == node)
        rows.sort(key=lambda e: (e.kind, e.source))
        rows.sort(key=lambda e: e.last_at, reverse=True)
        return rows[:limit]
