"""The node backend's identity and control links: join tokens, node credentials, and the
``node_links`` row a gateway keeps for each node daemon's control stream.

Every write that must have exactly one winner is one conditional statement: a join token is
used by ``UPDATE … WHERE used_at IS NULL AND expires_at > now RETURNING`` (a racing use waits
for the row lock, then re-checks ``used_at`` and finds it set); a stream's close only matches
its own session; fencing is ``UPDATE nodes SET epoch = epoch + 1 … RETURNING epoch``.
The fencing epoch and the address peers reach a node at live on ``nodes`` (the scheduler's
row); ``node_links`` holds what the daemon reported on its latest stream.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.postgres.codec import gpu_inventory_from, gpu_inventory_json
from adapters.postgres.errors import translated
from adapters.postgres.node_tables import join_tokens, node_credentials
from adapters.postgres.rows import fetch_one, insert_new
from adapters.postgres.tables import nodes, pools
from domain.enrollment import JoinToken, NodeCredential
from domain.errors import NotFound, Unavailable
from domain.node_events import NodeEvent, NodeEventKind
from domain.node_ports import NodeLink
from domain.node_protocol import NodeCapacity

# -- enrollment -----------------------------------------------------------------------------

_USE_TOKEN = text(
    "UPDATE join_tokens SET used_at = :now, used_by = :node "
    "WHERE token_hash = :token_hash AND used_at IS NULL AND expires_at > :now "
    "RETURNING token_hash"
)
_CREDENTIALS = (
    select(node_credentials)
    .where(node_credentials.c.node == bindparam("node"))
    .order_by(node_credentials.c.created_at, node_credentials.c.id.collate("C"))
)
# an earlier limit already set is kept
_INSTALLATION = text("SELECT id FROM installation ORDER BY created_at, id LIMIT 1")
_RETIRE = text(
    "UPDATE node_credentials SET valid_until = :valid_until "
    "WHERE node = :node AND id <> :keep_id "
    "AND (valid_until IS NULL OR valid_until > :valid_until)"
)


def _token_values(t: JoinToken) -> dict[str, Any]:
    return {
        "token_hash": t.token_hash,
        "pool": t.pool,
        "node_name": t.node_name,
        "created_by": t.created_by,
        "created_at": t.created_at,
        "expires_at": t.expires_at,
        "used_at": t.used_at,
        "used_by": t.used_by,
    }


def _token(r: Any) -> JoinToken:
    return JoinToken(
        token_hash=r["token_hash"],
        pool=r["pool"],
        node_name=r["node_name"],
        created_by=r["created_by"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        used_at=r["used_at"],
        used_by=r["used_by"],
    )


def _credential(r: Any) -> NodeCredential:
    return NodeCredential(
        id=r["id"],
        node=r["node"],
        credential_hash=r["credential_hash"],
        created_at=r["created_at"],
        valid_until=r["valid_until"],
    )


class PostgresEnrollmentRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def add_join_token(self, token: JoinToken) -> None:
        exists = await fetch_one(self._conn, pools, "name", token.pool)
        if exists is None:
            raise NotFound(
                f"pool {token.pool} does not exist", fix="see `tp fleet ls`", field="pool"
            )
        await insert_new(self._conn, join_tokens, _token_values(token), "join token")

    async def join_token(self, token_hash: str) -> JoinToken | None:
        with translated("get a join token"):
            row = await fetch_one(self._conn, join_tokens, "token_hash", token_hash)
        return _token(row) if row else None

    async def use_join_token(self, token_hash: str, node: str, now: datetime) -> bool:
        params = {"token_hash": token_hash, "node": node, "now": now}
        with translated(f"use a join token for node {node}"):
            used = (await self._conn.execute(_USE_TOKEN, params)).first()
        return used is not None

    async def add_credential(self, credential: NodeCredential) -> None:
        exists = await fetch_one(self._conn, nodes, "name", credential.node)
        if exists is None:
            raise NotFound(
                f"node {credential.node} does not exist", fix="see `tp fleet ls`", field="node"
            )
        values = {
            "id": credential.id,
            "node": credential.node,
            "credential_hash": credential.credential_hash,
            "created_at": credential.created_at,
            "valid_until": credential.valid_until,
        }
        await insert_new(self._conn, node_credentials, values, f"credential {credential.id}")

    async def credential(self, credential_hash: str) -> NodeCredential | None:
        with translated("get a node credential"):
            row = await fetch_one(self._conn, node_credentials, "credential_hash", credential_hash)
        return _credential(row) if row else None

    async def credentials(self, node: str) -> builtins.list[NodeCredential]:
        with translated(f"list the credentials of node {node}"):
            rows = (await self._conn.execute(_CREDENTIALS, {"node": node})).mappings().all()
        return [_credential(r) for r in rows]

    async def retire_credentials(self, node: str, keep_id: str, valid_until: datetime) -> None:
        params = {"node": node, "keep_id": keep_id, "valid_until": valid_until}
        with translated(f"retire the old credentials of node {node}"):
            await self._conn.execute(_RETIRE, params)

    async def installation(self) -> str:
        with translated("read this installation's id"):
            found = (await self._conn.execute(_INSTALLATION)).scalar()
        if found is None:
            raise Unavailable(
                "the database holds no installation id (table installation is empty)",
                fix="restore it from a backup of this database: node daemons check it, and "
                "a new one would make them refuse this control plane",
            )
        return str(found)


# -- control links --------------------------------------------------------------------------

_LINK_COLUMNS = (
    "l.node, l.session, l.gateway, l.connected_at, l.heartbeat_at, l.gpus, l.gpu_model, "
    "l.cpus, l.memory_mb, l.address, l.daemon_version, n.epoch, l.closed_at, l.peer, l.instance, "
    "l.gpu_inventory"
)
# The node row first (its lock orders two opens of one node), then the link: a new session.
_OPEN = text(
    "WITH n AS (UPDATE nodes SET connectivity = 'connected', address = :address, "
    "           updated_at = :now WHERE name = :node RETURNING name, epoch), "
    "l AS (INSERT INTO node_links AS o (node, session, gateway, connected_at, heartbeat_at, "
    "             gpus, gpu_model, cpus, memory_mb, address, daemon_version, peer, instance, "
    "             gpu_inventory) "
    "      SELECT n.name, 1, :gateway, :now, :now, :gpus, :gpu_model, :cpus, :memory_mb, "
    "             :address, :daemon_version, :peer, :instance, "
    "             CAST(:gpu_inventory AS jsonb) FROM n "
    "      ON CONFLICT (node) DO UPDATE SET session = o.session + 1, "
    "        gateway = excluded.gateway, connected_at = excluded.connected_at, "
    "        heartbeat_at = excluded.heartbeat_at, gpus = excluded.gpus, "
    "        gpu_model = excluded.gpu_model, cpus = excluded.cpus, "
    "        memory_mb = excluded.memory_mb, address = excluded.address, "
    "        daemon_version = excluded.daemon_version, closed_at = NULL, "
    "        peer = excluded.peer, instance = excluded.instance, "
    "        gpu_inventory = excluded.gpu_inventory "
    "      RETURNING *) "
    f"SELECT {_LINK_COLUMNS} FROM l JOIN n ON n.name = l.node"
)
# A close, and an expiry, first lock the node rows (as ``open`` does, so no deadlock), then
# decide from a fresh snapshot: a statement that waited for a concurrent open's lock would
# otherwise re-check the node row against the link row it read before that open committed.
_LOCK_NODE = text("SELECT name FROM nodes WHERE name = :node FOR UPDATE")
# Only the current session closes the link; a lost (fenced) node stays lost.
_CLOSE = text(
    "WITH l AS (UPDATE node_links SET closed_at = coalesce(closed_at, :now) "
    "           WHERE node = :node AND session = :session RETURNING node), "
    "upd AS (UPDATE nodes n SET connectivity = 'disconnected', updated_at = :now FROM l "
    "        WHERE n.name = l.node AND n.connectivity = 'connected') "
    "SELECT count(*) FROM l"
)
_LOCK_NODES = text(
    'SELECT name FROM nodes WHERE name = ANY(CAST(:nodes AS text[])) ORDER BY name COLLATE "C" '
    "FOR UPDATE"
)
_CLOSE_ALL = text(
    "WITH s AS (SELECT * FROM unnest(CAST(:nodes AS text[]), CAST(:sessions AS bigint[])) "
    "           AS s(node, session)), "
    "l AS (UPDATE node_links l SET closed_at = coalesce(l.closed_at, :now) FROM s "
    "      WHERE l.node = s.node AND l.session = s.session RETURNING l.node), "
    "upd AS (UPDATE nodes n SET connectivity = 'disconnected', updated_at = :now "
    "        WHERE n.name IN (SELECT node FROM l) AND n.connectivity = 'connected') "
    "SELECT DISTINCT node FROM l"
)
# The beats of the current sessions are written; those of sessions a newer one replaced are
# returned (both parts read the same snapshot).
_BEAT = text(
    "WITH b AS (SELECT * FROM unnest(CAST(:nodes AS text[]), CAST(:sessions AS bigint[]), "
    "                                CAST(:ats AS timestamptz[])) AS b(node, session, at)), "
    "upd AS (UPDATE node_links l SET heartbeat_at = b.at FROM b "
    "        WHERE l.node = b.node AND l.session = b.session) "
    "SELECT b.node, b.session FROM b JOIN node_links l ON l.node = b.node "
    "WHERE l.session > b.session"
)
_REVIVE = text(
    "UPDATE nodes n SET connectivity = 'connected', updated_at = :now "
    "FROM node_links l, "
    "     unnest(CAST(:nodes AS text[]), CAST(:sessions AS bigint[])) AS s(node, session) "
    "WHERE n.name = s.node AND l.node = s.node AND l.session = s.session "
    "AND l.closed_at IS NULL AND n.connectivity = 'disconnected' RETURNING n.name"
)
_GET = text(
    f"SELECT {_LINK_COLUMNS} FROM node_links l JOIN nodes n ON n.name = l.node WHERE l.node = :node"
)
_ALL = text(
    f"SELECT {_LINK_COLUMNS} FROM node_links l JOIN nodes n ON n.name = l.node "
    'ORDER BY l.node COLLATE "C"'
)
_SILENT = (
    "FROM nodes n JOIN node_links l ON l.node = n.name "
    "WHERE n.connectivity = 'connected' AND l.heartbeat_at < :older_than "
)
_LOCK_SILENT = text("SELECT n.name " + _SILENT + 'ORDER BY n.name COLLATE "C" FOR UPDATE OF n')
_EXPIRE = text(
    "UPDATE nodes n SET connectivity = 'disconnected', updated_at = :now FROM node_links l "
    "WHERE l.node = n.name AND n.connectivity = 'connected' AND l.heartbeat_at < :older_than "
    "AND n.name = ANY(CAST(:names AS text[])) RETURNING n.name"
)
_EPOCH = text("SELECT epoch FROM nodes WHERE name = :node")
_FENCE = text("UPDATE nodes SET epoch = epoch + 1 WHERE name = :node RETURNING epoch")


def _link(r: Any) -> NodeLink:
    return NodeLink(
        node=r["node"],
        session=r["session"],
        gateway=r["gateway"],
        connected_at=r["connected_at"],
        heartbeat_at=r["heartbeat_at"],
        capacity=NodeCapacity(
            r["gpus"],
            r["gpu_model"],
            r["cpus"],
            r["memory_mb"],
            gpu_inventory_from(r["gpu_inventory"]),
        ),
        address=r["address"],
        daemon_version=r["daemon_version"],
        epoch=r["epoch"],
        closed_at=r["closed_at"],
        peer=r["peer"],
        instance=r["instance"],
    )


def _no_node(node: str) -> NotFound:
    return NotFound(f"node {node} does not exist", fix="see `tp fleet ls`", field="node")


class PostgresNodeLinkRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

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
        params = {
            "node": node,
            "gateway": gateway,
            "gpus": capacity.gpus,
            "gpu_model": capacity.gpu_model,
            "cpus": capacity.cpus,
            "memory_mb": capacity.memory_mb,
            "gpu_inventory": gpu_inventory_json(capacity.gpu_inventory),
            "address": address,
            "daemon_version": daemon_version,
            "now": now,
            "peer": peer,
            "instance": instance,
        }
        with translated(f"open the control link of node {node}"):
            row = (await self._conn.execute(_OPEN, params)).mappings().first()
        if row is None:
            raise _no_node(node)
        return _link(row)

    async def current(self, node: str) -> NodeLink | None:
        with translated(f"lock the control link of node {node}"):
            await self._conn.execute(_LOCK_NODE, {"node": node})
        return await self.get(node)  # a new statement: it sees what committed meanwhile

    async def close(self, node: str, session: int, now: datetime) -> bool:
        params = {"node": node, "session": session, "now": now}
        with translated(f"close the control link of node {node}"):
            await self._conn.execute(_LOCK_NODE, {"node": node})
            closed = (await self._conn.execute(_CLOSE, params)).scalar()
        return bool(closed)

    async def close_all(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        if not sessions:
            return []
        params = {"nodes": [s[0] for s in sessions], "sessions": [s[1] for s in sessions]}
        with translated(f"close the control links of {len(sessions)} nodes"):
            await self._conn.execute(_LOCK_NODES, {"nodes": sorted({s[0] for s in sessions})})
            names = (await self._conn.execute(_CLOSE_ALL, {**params, "now": now})).scalars()
            return sorted(names.all())

    async def beat(
        self, beats: Sequence[tuple[str, int, datetime]]
    ) -> builtins.list[tuple[str, int]]:
        if not beats:
            return []
        params = {
            "nodes": [b[0] for b in beats],
            "sessions": [b[1] for b in beats],
            "ats": [b[2] for b in beats],
        }
        with translated(f"record {len(beats)} heartbeats"):
            rows = (await self._conn.execute(_BEAT, params)).all()
        return sorted((r[0], int(r[1])) for r in rows)

    async def revive(
        self, sessions: Sequence[tuple[str, int]], now: datetime
    ) -> builtins.list[str]:
        if not sessions:
            return []
        params = {"nodes": [s[0] for s in sessions], "sessions": [s[1] for s in sessions]}
        with translated(f"reconnect {len(sessions)} nodes"):
            names = (await self._conn.execute(_REVIVE, {**params, "now": now})).scalars().all()
        return sorted(names)

    async def get(self, node: str) -> NodeLink | None:
        with translated(f"get the control link of node {node}"):
            row = (await self._conn.execute(_GET, {"node": node})).mappings().first()
        return _link(row) if row else None

    async def all(self) -> builtins.list[NodeLink]:
        with translated("list control links"):
            rows = (await self._conn.execute(_ALL)).mappings().all()
        return [_link(r) for r in rows]

    async def expire(self, older_than: datetime, now: datetime) -> builtins.list[str]:
        params: dict[str, Any] = {"older_than": older_than, "now": now}
        with translated("expire silent control links"):
            locked = (await self._conn.execute(_LOCK_SILENT, params)).scalars().all()
            if not locked:
                return []
            params["names"] = list(locked)
            names = (await self._conn.execute(_EXPIRE, params)).scalars().all()
        return sorted(names)

    async def epoch(self, node: str) -> int:
        with translated(f"get the epoch of node {node}"):
            epoch = (await self._conn.execute(_EPOCH, {"node": node})).scalar()
        if epoch is None:
            raise _no_node(node)
        return int(epoch)

    async def fence(self, node: str) -> int:
        with translated(f"fence node {node}"):
            epoch = (await self._conn.execute(_FENCE, {"node": node})).scalar()
        if epoch is None:
            raise _no_node(node)
        return int(epoch)


# -- security events ------------------------------------------------------------------------

# The node row first (as ``open`` and ``close``), so that two gateways recording events of one
# node keep its cap; then one statement coalesces, the next trims.
_RECORD = text(
    "INSERT INTO node_events AS e (node, kind, source, first_at, last_at, count, message) "
    "VALUES (:node, :kind, :source, :at, :at, 1, :message) "
    "ON CONFLICT (node, kind, source) DO UPDATE SET count = e.count + 1, "
    "  last_at = greatest(e.last_at, excluded.last_at), message = excluded.message "
    "RETURNING node, kind, source, first_at, last_at, count, message"
)
_TRIM = text(
    "DELETE FROM node_events d USING ("
    "  SELECT kind, source FROM node_events WHERE node = :node "
    '  ORDER BY last_at DESC, kind COLLATE "C", source COLLATE "C" OFFSET :keep) s '
    "WHERE d.node = :node AND d.kind = s.kind AND d.source = s.source"
)
_EVENTS = text(
    "SELECT node, kind, source, first_at, last_at, count, message FROM node_events "
    'WHERE node = :node ORDER BY last_at DESC, kind COLLATE "C", source COLLATE "C" '
    "LIMIT :limit"
)


def _event(r: Any) -> NodeEvent:
    return NodeEvent(
        r["node"],
        NodeEventKind(r["kind"]),
        r["source"],
        r["first_at"],
        r["last_at"],
        r["count"],
        r["message"],
    )


class PostgresNodeEventRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def record(self, event: NodeEvent, keep: int) -> NodeEvent:
        params = {
            "node": event.node,
            "kind": event.kind.value,
            "source": event.source,
            "at": event.last_at,
            "message": event.message,
        }
        with translated(f"record an event of node {event.node}"):
            locked = (await self._conn.execute(_LOCK_NODE, {"node": event.node})).first()
            if locked is None:
                raise _no_node(event.node)
            row = (await self._conn.execute(_RECORD, params)).mappings().one()
            await self._conn.execute(_TRIM, {"node": event.node, "keep": keep})
        return _event(row)

    async def of_node(self, node: str, limit: int) -> builtins.list[NodeEvent]:
        with translated(f"list the events of node {node}"):
            rows = (await self._conn.execute(_EVENTS, {"node": node, "limit": limit})).mappings()
            return [_event(r) for r in rows.all()]
