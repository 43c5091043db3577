"""In-memory node state times and connectivity history (twin of migration 0029's triggers on
``nodes``): every in-memory write that moves a node's scheduling state or connectivity goes
through :func:`write_moved`."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime

from adapters.memory.db import TableDef, Tx
from domain.errors import InvalidInput
from domain.fleet import CONNECTIVITY_KEPT, Connectivity, ConnectivityChange, Node, SchedState


@dataclass(frozen=True, slots=True)
class NodeHistory:
    node: str
    changes: tuple[ConnectivityChange, ...]  # newest first, at most CONNECTIVITY_KEPT


HISTORY_TABLES = [TableDef("node_connectivity", pk=lambda h: h.node, immutable=True)]


def write_moved(
    tx: Tx,
    node: Node,
    at: datetime,
    sched: SchedState | None = None,
    connectivity: Connectivity | None = None,
) -> Node:
    """Store ``node`` in these states, stamping what changed with ``at``; a changed
    connectivity joins its history."""
    moved = node.moved(at, sched, connectivity)
    tx.write("nodes", moved)
    if moved.connectivity is not node.connectivity:
        old: NodeHistory | None = tx.get("node_connectivity", node.name)
        change = ConnectivityChange(node.name, at, moved.connectivity)
        kept = (change, *(old.changes if old else ()))[:CONNECTIVITY_KEPT]
        tx.write("node_connectivity", NodeHistory(node.name, kept))
    return moved


def history(tx: Tx, per_node: int) -> dict[str, builtins.list[ConnectivityChange]]:
    if not 1 <= per_node <= CONNECTIVITY_KEPT:
        raise InvalidInput(
            f"per_node {per_node} is out of range",
            fix=f"ask for 1 to {CONNECTIVITY_KEPT} changes per node",
            field="per_node",
        )
    names = {n.name for n in tx.select("nodes", lambda n: True)}
    rows: list[NodeHistory] = tx.select("node_connectivity", lambda h: h.node in names)
    return {h.node: list(h.changes[:per_node]) for h in sorted(rows, key=lambda h: h.node)}
