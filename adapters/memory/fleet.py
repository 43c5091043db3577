"""In-memory pools, nodes and profiles (twin of adapters/postgres/fleet.py)."""

from __future__ import annotations

import builtins
from collections import Counter
from dataclasses import replace
from datetime import datetime

from adapters.memory.db import Tx
from adapters.memory.node_states import history, write_moved
from domain.admission import (
    mcpu,
)
from domain.errors import Conflict, NotFound
from domain.fleet import Connectivity, ConnectivityChange, Node, Pool, SchedState, Validation
from domain.fleet_removal import refuse_pool_removal, refuse_removal
from domain.node_ports import NodeLink
from domain.requests import Profile


def _shape(p: Pool) -> tuple[object, ...]:
    return (p.backend, p.gpus_per_node, mcpu(p.cpus_per_node), p.memory_mb_per_node)


class MemoryFleetRepository:
    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    async def put_pool(self, pool: Pool) -> None:
        await self._tx.lock(("pools", "pk", pool.name))
        old: Pool | None = self._tx.get("pools", pool.name)
        if old is not None and _shape(old) != _shape(pool):
            nodes = {n.name for n in await self.nodes() if n.pool == pool.name}
            busy = [
                r.attempt_id
                for r in self._tx.select("reservations", lambda r: True)
                if any(a.node in nodes for a in r.assignments)
            ]
            if busy:
                raise Conflict(
                    f"pool {pool.name} has live reservations ({len(busy)}); its node shape "
                    "and backend cannot change now",
                    fix="cordon its nodes, wait for their jobs to end, then change the pool",
                )
        # ``unavailable`` is the capacity sync's (set_pool_unavailable): put_pool keeps it
        self._tx.write("pools", replace(pool, unavailable=old.unavailable if old else ""))

    async def set_pool_unavailable(self, name: str, reason: str) -> None:
        await self._tx.lock(("pools", "pk", name))
        old: Pool | None = self._tx.get("pools", name)
        if old is None:
            raise NotFound(f"pool {name} does not exist", fix="list the pools with tp fleet ls")
        self._tx.write("pools", replace(old, unavailable=reason))

    async def pools(self) -> builtins.list[Pool]:
        rows: list[Pool] = self._tx.select("pools", lambda p: True)
        return sorted(rows, key=lambda p: p.name)

    async def held_pools(self) -> builtins.list[Pool]:
        # exclusive key locks stand for PostgreSQL's shared row locks here: held pools wait
        # for a removal in flight, and a removal waits for them
        for name in sorted(p.name for p in self._tx.scan("pools", lambda p: True)):
            await self._tx.lock(("pools", "pk", name))
        return await self.pools()

    async def put_node(self, node: Node) -> None:
        if self._tx.get("pools", node.pool) is None:
            raise NotFound(f"pool {node.pool} does not exist", fix="create the pool first")
        await self._tx.lock(("nodes", "pk", node.name))
        old: Node | None = self._tx.get("nodes", node.name)
        if old is not None and old.pool != node.pool and _reserved_on(self._tx, node.name):
            raise Conflict(
                f"node {node.name} has live reservations; it cannot move to pool {node.pool}",
                fix="drain it and wait for its jobs to end first",
            )
        if old is not None and old.pool == node.pool:  # its check result stays with it
            node = replace(
                node,
                validation=old.validation,
                validation_reason=old.validation_reason,
                validated_at=old.validated_at,
            )
        else:  # new, or moved: its result was about other peers
            node = replace(
                node, validation=Validation.UNCHECKED, validation_reason="", validated_at=None
            )
        self._tx.write("nodes", node)

    async def set_validation(
        self, name: str, validation: Validation, reason: str, at: datetime
    ) -> None:
        await self._tx.lock(("nodes", "pk", name))
        node: Node | None = self._tx.get("nodes", name)
        if node is not None:
            node = replace(node, validation=validation, validation_reason=reason, validated_at=at)
            self._tx.write("nodes", node)

    async def node(self, name: str) -> Node | None:
        found: Node | None = self._tx.get("nodes", name)
        return found

    async def nodes(self) -> builtins.list[Node]:
        rows: list[Node] = self._tx.ordered("nodes", "pool, name", lambda n: (n.pool, n.name))
        return rows

    async def remove_node(self, name: str) -> Node:
        await self._tx.lock(("nodes", "pk", name))
        node: Node | None = self._tx.get("nodes", name)
        if node is None:
            raise NotFound(f"node {name} does not exist", fix="see `tp fleet ls`", field="name")
        link: NodeLink | None = self._tx.get("node_links", name)
        streaming = link is not None and link.closed_at is None
        refuse_removal(name, _reserved_on(self._tx, name), streaming)
        tx = self._tx  # what PostgreSQL deletes by its foreign keys' CASCADE
        for table in ("nodes", "node_links", "node_extras", "node_connectivity", "node_usage"):
            if tx.get(table, name) is not None:
                tx.delete(table, name)
        for event in tx.select("node_events", lambda e: e.node == name):
            tx.delete("node_events", (event.node, event.kind, event.source))
        for credential in tx.select("node_credentials", lambda c: c.node == name):
            tx.delete("node_credentials", credential.id)
        return node

    async def remove_pool(self, name: str) -> Pool:
        await self._tx.lock(("pools", "pk", name))
        pool: Pool | None = self._tx.get("pools", name)
        if pool is None:
            raise NotFound(f"pool {name} does not exist", fix="see `tp fleet ls`", field="name")
        refuse_pool_removal(name, len(self._tx.select("nodes", lambda n: n.pool == name)))
        self._tx.delete("pools", name)
        for check in self._tx.select("pool_checks", lambda c: c.pool == name):
            self._tx.delete("pool_checks", check.id)
        for token in self._tx.select("join_tokens", lambda t: t.pool == name):
            self._tx.delete("join_tokens", token.token_hash)
        return pool

    async def node_counts(self) -> dict[str, int]:
        return dict(Counter(self._tx.project("nodes", lambda n: True, lambda n: n.pool)))

    async def set_node_state(
        self,
        name: str,
        sched: SchedState | None = None,
        connectivity: Connectivity | None = None,
        at: datetime | None = None,
    ) -> Node:
        await self._tx.lock(("nodes", "pk", name))
        node: Node | None = self._tx.get("nodes", name)
        if node is None:
            raise NotFound(f"node {name} does not exist", fix="see `tp fleet ls`")
        if at is None:  # no clock in this store: the states change, their times stay unknown
            node = replace(
                node,
                sched=sched if sched is not None else node.sched,
                connectivity=connectivity if connectivity is not None else node.connectivity,
            )
            self._tx.write("nodes", node)
            return node
        return write_moved(self._tx, node, at, sched, connectivity)

    async def connectivity_history(
        self, per_node: int
    ) -> dict[str, builtins.list[ConnectivityChange]]:
        return history(self._tx, per_node)

    async def put_profile(self, profile: Profile) -> None:
        await self._tx.lock(("profiles", "pk", profile.name))
        self._tx.write("profiles", profile)

    async def profiles(self) -> builtins.list[Profile]:
        rows: list[Profile] = self._tx.select("profiles", lambda p: True)
        return sorted(rows, key=lambda p: p.name)


def _reserved_on(tx: Tx, node: str) -> bool:
    return bool(tx.select("reservations", lambda r: any(a.node == node for a in r.assignments)))
