"""Removing a node or a pool from the fleet (`tp fleet node rm`, `tp fleet pool rm`;
docs/fleet.md, "Removing nodes and pools"). Admins and operators only.

A node goes only once nothing runs there on proof (no live reservation) and no daemon holds a
control stream for it; its credentials go with it, so a copy of the daemon still running
elsewhere cannot come back under that name without a new join token. A
pool goes once it has no nodes and no named profile depends on it alone. The rules are checked
by the store under the row lock it deletes with (``FleetRepository.remove_node``), so a
reservation or a daemon's reconnection racing the removal either waits for it or refuses it."""

from __future__ import annotations

from application.context import Context
from application.fleet import refuse_orphaned_profiles
from application.policy import OPERATORS, require
from domain.auth import Principal
from domain.fleet import Node, Pool


async def remove_node(ctx: Context, principal: Principal, name: str) -> Node:
    """Remove node ``name``; NotFound if absent, Conflict while it holds work or is connected."""
    require(principal, OPERATORS, "change the fleet")
    async with ctx.units.fleet() as uow:
        node = await uow.fleet.remove_node(name)
        await uow.commit()
    return node


async def remove_pool(ctx: Context, principal: Principal, name: str) -> Pool:
    """Remove pool ``name``; NotFound if absent, Conflict while it has nodes or a named profile
    resolves only through it (pending jobs that asked for it wait, "config", as for any pool
    that is gone)."""
    require(principal, OPERATORS, "change the fleet")
    async with ctx.units.fleet() as uow:
        before = await uow.fleet.pools()
        pool = await uow.fleet.remove_pool(name)
        await refuse_orphaned_profiles(uow, before, f"without pool {name}")
        await uow.commit()
    return pool
