"""Pools, nodes and profiles.

A node row carries copies of its pool's CPUs, memory and GPU count (``mcpu``, ``memory_mb``,
``gpus``), so that the reservation store's constraints can see the capacity;
``put_pool`` and ``put_node`` keep those copies in step with the pool. Lock order: pool row,
then node rows (by name), as ``reserve`` takes node rows — no deadlock between them. Storing a
profile holds every pool row FOR SHARE (``held_pools``); in `tp fleet apply` that comes after its
node rows, so an apply racing another apply's reshaping of a pool can deadlock: PostgreSQL
aborts one, which answers Conflict ("retry"), nothing half-applied.

Names and ids sort by code point (``COLLATE "C"``), as Python and the in-memory adapters sort
them, whatever the database's locale.
"""

from __future__ import annotations

import builtins
from datetime import datetime

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres import codec
from adapters.postgres.errors import translated
from adapters.postgres.tables import nodes, pools, profiles
from domain.errors import Conflict, InvalidInput, NotFound
from domain.fleet import (
    CONNECTIVITY_KEPT,
    Connectivity,
    ConnectivityChange,
    Node,
    Pool,
    SchedState,
    Validation,
)
from domain.fleet_removal import refuse_pool_removal, refuse_removal
from domain.requests import Profile

_SHAPE = ("backend", "gpus_per_node", "mcpu_per_node", "memory_mb_per_node")

_LOCK_POOL = select(pools).where(pools.c.name == bindparam("name")).with_for_update()
_SHARE_POOL = select(pools).where(pools.c.name == bindparam("name")).with_for_update(read=True)

_upsert = pg_insert(pools)
_UPSERT_POOL = _upsert.on_conflict_do_update(
    index_elements=[pools.c.name],
    # ``unavailable`` is the capacity sync's (set_pool_unavailable): put_pool keeps it
    set_={
        c.name: _upsert.excluded[c.name]
        for c in pools.columns
        if c.name not in ("name", "unavailable")
    },
)

_LOCK_POOL_NODES = text("SELECT name FROM nodes WHERE pool = :pool ORDER BY name FOR UPDATE")
_POOL_RESERVED = text(
    "SELECT count(DISTINCT rm.attempt_id) FROM reservation_members rm "
    "JOIN nodes n ON n.name = rm.node WHERE n.pool = :pool"
)
# nodes of a pool take its new shape: CPUs, memory and GPU count
_RESHAPE_POOL_NODES = text(
    "UPDATE nodes SET mcpu = :mcpu, memory_mb = :memory_mb, gpus = :gpus, updated_at = now() "
    "WHERE pool = :pool"
)

_LOCK_NODE = text("SELECT pool FROM nodes WHERE name = :name FOR UPDATE")
_NODE_RESERVED = text("SELECT EXISTS (SELECT 1 FROM reservation_members WHERE node = :name)")
_PUT_NODE = text(
    "INSERT INTO nodes (name, pool, sched, connectivity, mcpu, memory_mb, gpus) "
    "VALUES (:name, :pool, :sched, :connectivity, :mcpu, :memory_mb, :gpus) "
    "ON CONFLICT (name) DO UPDATE SET pool = excluded.pool, sched = excluded.sched, "
    "    connectivity = excluded.connectivity, mcpu = excluded.mcpu, "
    "    memory_mb = excluded.memory_mb, gpus = excluded.gpus, updated_at = now(), "
    # a node moved to another pool is unchecked again: its result was about other peers
    "    validation = CASE WHEN nodes.pool = excluded.pool THEN nodes.validation "
    "                 ELSE 'unchecked' END, "
    "    validation_reason = CASE WHEN nodes.pool = excluded.pool "
    "                        THEN nodes.validation_reason ELSE '' END, "
    "    validated_at = CASE WHEN nodes.pool = excluded.pool THEN nodes.validated_at END"
)
_SET_NODE_STATE = text(
    "UPDATE nodes SET sched = coalesce(CAST(:sched AS text), sched), "
    "connectivity = coalesce(CAST(:connectivity AS text), connectivity), "
    "updated_at = coalesce(CAST(:at AS timestamptz), now()) "
    "WHERE name = :name "
    "RETURNING name, pool, sched, connectivity, validation, validation_reason, validated_at, "
    "sched_changed_at, connectivity_changed_at"
)

# Each node's newest changes: the (node, seq) index read backwards per node.
_HISTORY = text(
    "SELECT h.node, h.at, h.connectivity FROM nodes n CROSS JOIN LATERAL ("
    "  SELECT node, at, connectivity, seq FROM node_connectivity c WHERE c.node = n.name "
    "  ORDER BY seq DESC LIMIT :n) h "
    'ORDER BY h.node COLLATE "C", h.seq DESC'
)
_ALL_POOLS = select(pools).order_by(pools.c.name.collate("C"))
_HELD_POOLS = _ALL_POOLS.with_for_update(read=True)
_NODE_COLUMNS = (
    nodes.c.name,
    nodes.c.pool,
    nodes.c.sched,
    nodes.c.connectivity,
    nodes.c.validation,
    nodes.c.validation_reason,
    nodes.c.validated_at,
    nodes.c.sched_changed_at,
    nodes.c.connectivity_changed_at,
)
_SET_VALIDATION = text(
    "UPDATE nodes SET validation = :validation, validation_reason = :reason, "
    "validated_at = :at, updated_at = now() WHERE name = :name"
)
_NODE = select(*_NODE_COLUMNS).where(nodes.c.name == bindparam("name"))
_ALL_NODES = select(*_NODE_COLUMNS).order_by(nodes.c.pool.collate("C"), nodes.c.name.collate("C"))
_NODE_COUNTS = select(nodes.c.pool, func.count()).group_by(nodes.c.pool)

# removal (application/fleet_removal.py): the node's row lock first, as ``reserve`` takes it
_LOCK_NODE_ROW = select(*_NODE_COLUMNS).where(nodes.c.name == bindparam("name")).with_for_update()
_NODE_STREAMING = text(
    "SELECT EXISTS (SELECT 1 FROM node_links WHERE node = :name AND closed_at IS NULL)"
)
_DELETE_NODE = text("DELETE FROM nodes WHERE name = :name")  # links, credentials…: CASCADE
_POOL_NODES = text("SELECT count(*) FROM nodes WHERE pool = :name")
_DELETE_POOL = text(
    "WITH tokens AS (DELETE FROM join_tokens WHERE pool = :name) "  # checks: CASCADE
    "DELETE FROM pools WHERE name = :name"
)

_p = pg_insert(profiles)
_PUT_PROFILE = _p.on_conflict_do_update(
    index_elements=[profiles.c.name],
    set_={"request": _p.excluded.request, "description": _p.excluded.description},
)
_ALL_PROFILES = select(profiles).order_by(profiles.c.name.collate("C"))


class PostgresFleetRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def put_pool(self, pool: Pool) -> None:
        values = codec.pool_values(pool)
        conn = self._conn
        with translated(f"store pool {pool.name}"):
            old = (await conn.execute(_LOCK_POOL, {"name": pool.name})).mappings().first()
            reshaped = old is not None and any(old[k] != values[k] for k in _SHAPE)
            if reshaped:
                # the nodes' row locks wait for reservations being written on them to commit
                await conn.execute(_LOCK_POOL_NODES, {"pool": pool.name})
                busy = (await conn.execute(_POOL_RESERVED, {"pool": pool.name})).scalar()
                if busy:
                    raise Conflict(
                        f"pool {pool.name} has live reservations ({busy}); its node shape "
                        "and backend cannot change now",
                        fix="cordon its nodes, wait for their jobs to end, then change the pool",
                    )
            await conn.execute(_UPSERT_POOL, values)
            if reshaped:
                await conn.execute(
                    _RESHAPE_POOL_NODES,
                    {
                        "pool": pool.name,
                        "mcpu": values["mcpu_per_node"],
                        "memory_mb": values["memory_mb_per_node"],
                        "gpus": pool.gpus_per_node,
                    },
                )

    async def set_pool_unavailable(self, name: str, reason: str) -> None:
        with translated(f"mark pool {name}"):
            done = await self._conn.execute(
                update(pools).where(pools.c.name == name).values(unavailable=reason)
            )
        if not done.rowcount:
            raise NotFound(f"pool {name} does not exist", fix="list the pools with tp fleet ls")

    async def pools(self) -> builtins.list[Pool]:
        with translated("list pools"):
            rows = (await self._conn.execute(_ALL_POOLS)).mappings().all()
        return [codec.pool_from_row(r) for r in rows]

    async def held_pools(self) -> builtins.list[Pool]:
        with translated("hold the pools"):
            rows = (await self._conn.execute(_HELD_POOLS)).mappings().all()
        return [codec.pool_from_row(r) for r in rows]

    async def put_node(self, node: Node) -> None:
        conn = self._conn
        with translated(f"store node {node.name}"):
            # FOR SHARE: the pool's shape cannot change until this node has taken it
            pool = (await conn.execute(_SHARE_POOL, {"name": node.pool})).mappings().first()
            if pool is None:
                raise NotFound(
                    f"pool {node.pool} does not exist",
                    fix="create the pool first (tp fleet pool add)",
                    field="pool",
                )
            old_pool = (await conn.execute(_LOCK_NODE, {"name": node.name})).scalar()
            moved = old_pool is not None and old_pool != node.pool
            if moved and (await conn.execute(_NODE_RESERVED, {"name": node.name})).scalar():
                raise Conflict(
                    f"node {node.name} has live reservations; it cannot move from pool "
                    f"{old_pool} to pool {node.pool}",
                    fix="drain it and wait for its jobs to end first",
                )
            await conn.execute(
                _PUT_NODE,
                {
                    "name": node.name,
                    "pool": node.pool,
                    "sched": node.sched.value,
                    "connectivity": node.connectivity.value,
                    "mcpu": pool["mcpu_per_node"],
                    "memory_mb": pool["memory_mb_per_node"],
                    "gpus": pool["gpus_per_node"],
                },
            )

    async def set_validation(
        self, name: str, validation: Validation, reason: str, at: datetime
    ) -> None:
        params = {"name": name, "validation": validation.value, "reason": reason, "at": at}
        with translated(f"record the check result of node {name}"):
            await self._conn.execute(_SET_VALIDATION, params)

    async def node(self, name: str) -> Node | None:
        with translated(f"get node {name}"):
            row = (await self._conn.execute(_NODE, {"name": name})).mappings().first()
        return codec.node_from_row(row) if row else None

    async def nodes(self) -> builtins.list[Node]:
        with translated("list nodes"):
            rows = (await self._conn.execute(_ALL_NODES)).mappings().all()
        return [codec.node_from_row(r) for r in rows]

    async def remove_node(self, name: str) -> Node:
        conn = self._conn
        with translated(f"remove node {name}"):
            row = (await conn.execute(_LOCK_NODE_ROW, {"name": name})).mappings().first()
            if row is None:
                raise NotFound(f"node {name} does not exist", fix="see `tp fleet ls`", field="name")
            node = codec.node_from_row(row)
            reserved = (await conn.execute(_NODE_RESERVED, {"name": name})).scalar_one()
            streaming = (await conn.execute(_NODE_STREAMING, {"name": name})).scalar_one()
            refuse_removal(name, reserved, streaming)
            await conn.execute(_DELETE_NODE, {"name": name})
        return node

    async def remove_pool(self, name: str) -> Pool:
        conn = self._conn
        with translated(f"remove pool {name}"):
            row = (await conn.execute(_LOCK_POOL, {"name": name})).mappings().first()
            if row is None:
                raise NotFound(f"pool {name} does not exist", fix="see `tp fleet ls`", field="name")
            nodes_in = (await conn.execute(_POOL_NODES, {"name": name})).scalar_one()
            refuse_pool_removal(name, nodes_in)
            await conn.execute(_DELETE_POOL, {"name": name})
        return codec.pool_from_row(row)

    async def node_counts(self) -> dict[str, int]:
        with translated("count the nodes of each pool"):
            rows = (await self._conn.execute(_NODE_COUNTS)).all()
        return {pool: count for pool, count in rows}

    async def set_node_state(
        self,
        name: str,
        sched: SchedState | None = None,
        connectivity: Connectivity | None = None,
        at: datetime | None = None,
    ) -> Node:
        params = {
            "name": name,
            "sched": sched.value if sched is not None else None,
            "connectivity": connectivity.value if connectivity is not None else None,
            "at": at,
        }
        with translated(f"change the state of node {name}"):
            row = (await self._conn.execute(_SET_NODE_STATE, params)).mappings().first()
        if row is None:
            raise NotFound(f"node {name} does not exist", fix="see `tp fleet ls`", field="node")
        return codec.node_from_row(row)

    async def connectivity_history(
        self, per_node: int
    ) -> dict[str, builtins.list[ConnectivityChange]]:
        if not 1 <= per_node <= CONNECTIVITY_KEPT:
            raise InvalidInput(
                f"per_node {per_node} is out of range",
                fix=f"ask for 1 to {CONNECTIVITY_KEPT} changes per node",
                field="per_node",
            )
        with translated("read the connectivity history of nodes"):
            rows = (await self._conn.execute(_HISTORY, {"n": per_node})).all()
        found: dict[str, builtins.list[ConnectivityChange]] = {}
        for r in rows:
            change = ConnectivityChange(r.node, r.at, Connectivity(r.connectivity))
            found.setdefault(r.node, []).append(change)
        return found

    async def put_profile(self, profile: Profile) -> None:
        values = {
            "name": profile.name,
            "request": profile.request,
            "description": profile.description,
        }
        with translated(f"store profile {profile.name}"):
            await self._conn.execute(_PUT_PROFILE, values)

    async def profiles(self) -> builtins.list[Profile]:
        with translated("list profiles"):
            rows = (await self._conn.execute(_ALL_PROFILES)).mappings().all()
        return [codec.profile_from_row(r) for r in rows]
