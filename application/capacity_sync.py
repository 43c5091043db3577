"""Capacity read from a backend's own scheduler (the Slurm backend, docs/slurm.md "Capacity"):
the pools and nodes it reports are written to the fleet, so that the Fleet API and page show
them with their state and the scheduling pass places work on them.

A backend takes part by being registered as a ``CapacityReporter`` (``Context.capacity``;
``capacity()``: pools of that backend, nodes with their states).
The sync only adds and updates: a pool or node it no longer reports is not deleted (reservations
may still refer to it); a node of a synced pool that is no longer reported is marked
disconnected. A pool of that backend in the fleet that it does not report (e.g. a Slurm pool
whose partition does not exist) is marked unavailable (``Pool.unavailable``: the backend's
``unreported(pool)`` says why and what to do) and its nodes disconnected, so it admits nothing;
the mark goes once the backend reports the pool. The backend is the truth for its nodes' states:
a TunePlane cordon of such a node is undone at the next sync (cordon the node in Slurm instead).
Run by the supervisor every ``capacity_every`` ticks, and by the scheduler before it reserves on
such a backend's pools.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

from application.context import Context
from domain.backend_ports import CapacityReporter
from domain.errors import Conflict, NotFound, Unavailable
from domain.fleet import Connectivity, Node, Pool, SchedState
from domain.unit_of_work import FleetUnit

log = logging.getLogger("tuneplane.capacity")


def capacity_sources(ctx: Context, names: Iterable[str] | None = None) -> list[CapacityReporter]:
    """The backends registered as reporting their own capacity (all, or those named)."""
    wanted = None if names is None else set(names)
    return [
        source for name, source in sorted(ctx.capacity.items()) if wanted is None or name in wanted
    ]


async def sync_capacity(ctx: Context, backends: Iterable[str] | None = None) -> int:
    """Write what every capacity-reporting backend (or those named) reports; returns how many
    pools and nodes changed. A backend that does not answer is skipped (its nodes keep their
    last state)."""
    changed = 0
    for source in capacity_sources(ctx, backends):
        try:
            pools, nodes = await source.capacity()
        except Unavailable as exc:
            log.warning("capacity of %s not read: %s", source.name, exc)
            continue
        except Exception:  # a fault in one backend's report never stops the others' or the loop
            log.exception("capacity of %s not read", source.name)
            continue
        changed += await _write(ctx, source, pools, nodes)
    return changed


async def _write(
    ctx: Context, source: CapacityReporter, pools: list[Pool], nodes: list[Node]
) -> int:
    backend = source.name
    now = ctx.clock.now()
    async with ctx.units.fleet() as uow:
        old_pools = {p.name: p for p in await uow.fleet.pools()}
        old_nodes = {n.name: n for n in await uow.fleet.nodes()}
    ours = {p.name for p in pools}
    writes: list[Callable[[FleetUnit], Awaitable[object]]] = []
    # a pool's mark (unavailable, or available again) is written after its nodes' states: each
    # write is its own transaction, and a reader that sees the mark change must see the nodes
    # already changed: a pool newly marked unavailable has its nodes disconnected (a CI run
    # caught the API answering in between when the mark went first), a pool whose mark went
    # has its nodes as the backend reports them. Before its mark goes, a returning pool's nodes
    # may show connected beside the old mark: the mark alone keeps it from admitting.
    marks: list[Callable[[FleetUnit], Awaitable[object]]] = []
    for pool in pools:
        was = old_pools.get(pool.name)
        if was is not None and was.backend != backend:
            log.warning("pool %s is a %s pool; %s leaves it alone", pool.name, was.backend, backend)
            ours.discard(pool.name)
            continue
        if was is None or dataclasses.replace(was, unavailable="") != pool:
            writes.append(_put_pool(pool))
        if was is not None and was.unavailable:
            marks.append(_mark_pool(pool.name, ""))
    missing = {p.name for p in old_pools.values() if p.backend == backend} - ours
    for name in sorted(missing):
        reason = source.unreported(name)
        if old_pools[name].unavailable != reason:
            log.warning("pool %s takes no new work: %s", name, reason)
            marks.append(_mark_pool(name, reason))
    seen = set()
    for node in nodes:
        if node.pool not in ours:
            continue
        seen.add(node.name)
        old = old_nodes.get(node.name)
        if old is None or old.pool != node.pool:
            old = node if old is None else dataclasses.replace(old, pool=node.pool)
            writes.append(_put_node(old))
        if (old.sched, old.connectivity) != (node.sched, node.connectivity):
            writes.append(_set_state(node.name, node.sched, node.connectivity, now))
    for name, old in old_nodes.items():
        gone = old.pool in ours and name not in seen
        if (gone or old.pool in missing) and old.connectivity is Connectivity.CONNECTED:
            writes.append(_set_state(name, None, Connectivity.DISCONNECTED, now))
    changed = 0
    for write in [*writes, *marks]:
        changed += await _in_own_unit(ctx, write)
    if changed:
        log.info("capacity of %s: %d pools and nodes updated", backend, changed)
    return changed


def _put_pool(pool: Pool) -> Callable[[FleetUnit], Awaitable[object]]:
    return lambda uow: uow.fleet.put_pool(pool)


def _mark_pool(name: str, reason: str) -> Callable[[FleetUnit], Awaitable[object]]:
    return lambda uow: uow.fleet.set_pool_unavailable(name, reason)


def _put_node(node: Node) -> Callable[[FleetUnit], Awaitable[object]]:
    return lambda uow: uow.fleet.put_node(node)


def _set_state(
    name: str, sched: SchedState | None, connectivity: Connectivity, at: datetime
) -> Callable[[FleetUnit], Awaitable[object]]:
    return lambda uow: uow.fleet.set_node_state(name, sched, connectivity, at)


async def _in_own_unit(ctx: Context, write: Callable[[FleetUnit], Awaitable[object]]) -> int:
    """One change in its own transaction: a Conflict (live reservations) skips only it."""
    with contextlib.suppress(Conflict, NotFound):
        async with ctx.units.fleet() as uow:
            await write(uow)
            await uow.commit()
            return 1
    return 0
