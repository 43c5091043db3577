"""Declarative fleet configuration: a whole file of fleets, pools, nodes, profiles, teams and
queues applied in one transaction (`tp fleet apply FILE`, ``TUNEPLANE_FLEET_FILE`` at server
start), and the defaults an empty database gets.

Applying upserts: what the file names is created or changed; nothing it does not name is
removed. An existing node keeps its scheduling state and connectivity. All or nothing: a bad
entry raises an error whose ``field`` is its path in the file (``pools[1].gpus_per_node``) and
nothing is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from application.auth import DEFAULT_QUEUE, DEFAULT_TEAM
from application.context import Context
from application.fleet import (
    LOCAL,
    check_pool,
    check_profile,
    refuse_orphaned_profiles,
    with_field,
)
from application.policy import OPERATORS, require
from domain.auth import Principal
from domain.catalog import check_name
from domain.errors import InvalidInput, TunePlaneError
from domain.fleet import Node, Pool, Queue, Team, new_node
from domain.requests import Profile
from domain.unit_of_work import FleetUnit

MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class PoolConfig:
    pool: Pool
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FleetConfig:
    pools: tuple[PoolConfig, ...] = ()
    profiles: tuple[Profile, ...] = ()
    teams: tuple[Team, ...] = ()
    queues: tuple[Queue, ...] = ()


@dataclass(frozen=True, slots=True)
class ApplySummary:
    created: tuple[str, ...]  # "pool a", "node a-0", …
    changed: tuple[str, ...]
    unchanged: int


def _unique(names: Sequence[str], kind: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise InvalidInput(
                f"{kind} {name} is given twice", fix="give each once", field=f"{kind}s[{i}].name"
            )
        seen.add(name)


def _check(config: FleetConfig) -> None:
    """Everything that needs no database: names, shapes, duplicates."""
    total = sum(len(x) for x in (config.pools, config.profiles, config.teams, config.queues))
    total += sum(len(p.nodes) for p in config.pools)
    if total > MAX_ENTRIES:
        raise InvalidInput(
            f"the configuration has {total} entries; at most {MAX_ENTRIES} are applied at once",
            fix="split it into several files",
        )
    for i, entry in enumerate(config.pools):
        try:
            check_pool(entry.pool)
        except TunePlaneError as exc:
            raise with_field(exc, f"pools[{i}]") from None
        for j, node in enumerate(entry.nodes):
            check_name(node, "node name", f"pools[{i}].nodes[{j}]")
    _unique([p.pool.name for p in config.pools], "pool")
    nodes = [(f"pools[{i}].nodes[{j}]", n) for i, p in enumerate(config.pools)
             for j, n in enumerate(p.nodes)]  # fmt: skip
    seen: dict[str, str] = {}
    for path, name in nodes:
        if name in seen:
            raise InvalidInput(
                f"node {name} is given twice (first at {seen[name]})",
                fix="a node belongs to one pool: list it once",
                field=path,
            )
        seen[name] = path
    for i, team in enumerate(config.teams):
        check_name(team.name, "team name", f"teams[{i}].name")
    _unique([t.name for t in config.teams], "team")
    for i, queue in enumerate(config.queues):
        try:
            queue.check()
        except TunePlaneError as exc:
            raise with_field(exc, f"queues[{i}]") from None
    _unique([q.name for q in config.queues], "queue")
    _unique([p.name for p in config.profiles], "profile")


async def apply_fleet_config(
    ctx: Context, config: FleetConfig, principal: Principal | None = None
) -> ApplySummary:
    """Upsert everything in ``config`` in one unit of work (all or nothing). ``principal``
    None is the server itself (``TUNEPLANE_FLEET_FILE``); otherwise an admin or operator."""
    if principal is not None:
        require(principal, OPERATORS, "apply a fleet configuration")
    try:
        return await _apply(ctx, config, by_operator=principal is not None)
    except TunePlaneError as exc:
        if exc.field and "[" in exc.field and not exc.message.startswith(exc.field):
            raise type(exc)(f"{exc.field}: {exc.message}", fix=exc.fix, field=exc.field) from None
        raise


async def _apply(ctx: Context, config: FleetConfig, by_operator: bool) -> ApplySummary:
    _check(config)
    created: list[str] = []
    changed: list[str] = []
    unchanged = 0

    def note(kind: str, name: str, old: object, new: object) -> None:
        nonlocal unchanged
        if old is None:
            created.append(f"{kind} {name}")
        elif old != new:
            changed.append(f"{kind} {name}")
        else:
            unchanged += 1

    async with ctx.units.fleet() as uow:
        before = await uow.fleet.pools()
        pools = {p.name: p for p in before}
        for i, entry in enumerate(config.pools):
            pool = entry.pool
            note("pool", pool.name, pools.get(pool.name), pool)
            await _at(f"pools[{i}]", uow.fleet.put_pool(pool))
            pools[pool.name] = pool
            for j, name in enumerate(entry.nodes):
                old = await uow.fleet.node(name)
                node = dataclasses.replace(old, pool=pool.name) if old else new_node(name, pool)
                note("node", name, old, node)
                await _at(f"pools[{i}].nodes[{j}]", uow.fleet.put_node(node))
        teams = {t.name for t in await uow.policy.teams()}
        for team in config.teams:
            note("team", team.name, team if team.name in teams else None, team)
            await uow.policy.put_team(team)
            teams.add(team.name)
        for i, queue in enumerate(config.queues):
            if queue.team not in teams:
                raise InvalidInput(
                    f"queue {queue.name}: no team {queue.team}",
                    fix="add it under [[teams]] in the file, or `tp admin team add "
                    f"{queue.team}`; teams: {', '.join(sorted(teams)) or 'none'}",
                    field=f"queues[{i}].team",
                )
            note("queue", queue.name, await uow.policy.queue(queue.name), queue)
            await _at(f"queues[{i}]", uow.policy.put_queue(queue))
        old_profiles = {p.name: p for p in await uow.fleet.profiles()}
        if config.profiles:  # held until commit, as `put_profile` holds them
            pools = {p.name: p for p in await uow.fleet.held_pools()}
        for i, profile in enumerate(config.profiles):
            try:
                check_profile(profile, list(pools.values()))
            except TunePlaneError as exc:
                raise with_field(exc, f"profiles[{i}]") from None
            note("profile", profile.name, old_profiles.get(profile.name), profile)
            await uow.fleet.put_profile(profile)
        if by_operator:  # the server's own file at start-up is applied as written
            await refuse_orphaned_profiles(uow, before, "after this apply")
        await uow.commit()
    return ApplySummary(tuple(created), tuple(changed), unchanged)


async def _at(path: str, write: Awaitable[None]) -> None:
    """Await a repository write; an error it raises names ``path``."""
    try:
        await write
    except TunePlaneError as exc:
        raise with_field(exc, path) from None


async def ensure_defaults(
    ctx: Context,
    cpus: float,
    memory_mb: int,
    backend: str = LOCAL,
    gpus: Callable[[], tuple[int, str | None]] | None = None,
) -> list[str]:
    """Make an empty system usable: without any pool, fleet ``local`` with pool ``local`` (this
    host's CPUs, memory and, when given, the GPUs ``gpus()`` finds: how many of which model,
    asked only when the pool is made) of ``backend``: with the
    local backend also its node
    ``local``; with the node backend the node is the local daemon, which enrolls itself.
    Without any queue, team and queue ``default``. Returns what it created (idempotent)."""
    created: list[str] = []
    async with ctx.units.fleet() as uow:
        if not await uow.fleet.pools():
            count, model = gpus() if gpus is not None else (0, None)
            pool = Pool(
                LOCAL, LOCAL, backend, count if model else 0, float(cpus), int(memory_mb), model,
                "this host",
            )  # fmt: skip
            await uow.fleet.put_pool(check_pool(pool))
            created.append(f"pool {LOCAL}")
            if backend == LOCAL:
                await uow.fleet.put_node(Node(LOCAL, LOCAL))
                created.append(f"node {LOCAL}")
        if not await uow.policy.queues():
            await _default_queue(uow)
            created.append(f"queue {DEFAULT_QUEUE}")
        await uow.commit()
    return created


async def _default_queue(uow: FleetUnit) -> None:
    if DEFAULT_TEAM not in {t.name for t in await uow.policy.teams()}:
        await uow.policy.put_team(Team(DEFAULT_TEAM))
    await uow.policy.put_queue(Queue(DEFAULT_QUEUE, DEFAULT_TEAM))
