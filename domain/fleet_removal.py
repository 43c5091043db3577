"""When a node or a pool may be removed from the fleet (docs/fleet.md, "Removing nodes and
pools"): the rules both stores apply under the row lock they take to delete it."""

from __future__ import annotations

from domain.errors import Conflict


def refuse_removal(node: str, reserved: bool, streaming: bool) -> None:
    """Conflict unless node ``node`` may go now: it holds no live reservation (its work has
    ended, on proof) and no daemon holds a control stream for it (``streaming``: its link is
    open; the gateway closes it when the stream ends or its heartbeats stop)."""
    if reserved:
        raise Conflict(
            f"node {node} holds live reservations; it cannot be removed now",
            fix=f"drain it (`tp fleet node drain {node}`), wait until `tp fleet ls` shows"
            " no work on it, then remove it",
            field="name",
        )
    if streaming:
        raise Conflict(
            f"node {node}'s daemon is connected; it cannot be removed now",
            fix="stop its daemon on that host (`systemctl stop tuneplane-node`, or end `tp node"
            " run`), wait until `tp fleet ls` shows it disconnected, then remove it",
            field="name",
        )


def refuse_pool_removal(pool: str, nodes: int) -> None:
    """Conflict while ``pool`` has nodes: they go first (each under its own rules)."""
    if nodes:
        raise Conflict(
            f"pool {pool} has {nodes} node{'s' if nodes != 1 else ''}; it cannot be removed now",
            fix="remove its nodes (`tp fleet node rm NAME`) or move them to another pool"
            " (`tp fleet node set NAME --pool P`) first",
            field="name",
        )
