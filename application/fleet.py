"""Fleets, pools, nodes and profiles: the operator's configuration, and what `tp fleet ls` and
`tp profiles` show. Changing the fleet is for admins and operators; everyone may read it.

A fleet is a name that groups pools (``Pool.fleet``); it has no settings of its own.
``apply_fleet_config`` (`tp fleet apply FILE`, ``TUNEPLANE_FLEET_FILE``) and the defaults of an
empty database live in ``application.fleet_config``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from application.context import Context
from application.policy import KEEP, OPERATORS, Keep, require
from domain.auth import Principal
from domain.catalog import Resources, check_name
from domain.errors import Conflict, InvalidInput, NotFound, TunePlaneError
from domain.fleet import NODE_BACKEND, ConnectivityChange, Node, Pool, SchedState, new_node
from domain.fleet_check import PoolCheck
from domain.requests import MAX_MEMBERS, Profile, RoleSpec, resolve_request, resolve_roles
from domain.unit_of_work import FleetUnit

BACKENDS = ("local", "node", "kubernetes", "slurm")
MAX_DESCRIPTION = 500
LOCAL = "local"


def check_text(value: str, field: str) -> str:
    """A description: at most 500 characters, no control characters."""
    if len(value) > MAX_DESCRIPTION or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidInput(
            f"{field} must be at most {MAX_DESCRIPTION} characters without control characters",
            fix="shorten it and keep it on one line",
            field=field,
        )
    return value


def check_pool(pool: Pool) -> Pool:
    pool.check()
    if pool.backend not in BACKENDS:
        raise InvalidInput(
            f"pool {pool.name}: unknown backend {pool.backend!r}",
            fix="use one of: " + ", ".join(BACKENDS),
            field="backend",
        )
    check_text(pool.description, "description")
    return pool


def with_field(exc: TunePlaneError, prefix: str) -> TunePlaneError:
    """The same error with its field put under ``prefix`` (``pools[1]`` + ``name``)."""
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    return type(exc)(exc.message, fix=exc.fix, field=field)


def resolves(request: str, pools: list[Pool]) -> bool:
    try:
        resolve_request(request, pools, "request")
    except InvalidInput:
        return False
    return True


async def refuse_orphaned_profiles(uow: FleetUnit, before: list[Pool], change: str) -> None:
    """Conflict when a named profile that resolved against the pools ``before`` names none as
    the unit of work now leaves them (its writes are then rolled back); ``change`` says what
    did it ("without pool b"). A profile that resolved nowhere already does not hold a change
    up. Profiles being stored meanwhile hold the pools (``held_pools``), so none slips past."""
    now = await uow.fleet.pools()
    orphans = [
        p.name
        for p in await uow.fleet.profiles()
        if resolves(p.request, before) and not resolves(p.request, now)
    ]
    if orphans:
        raise Conflict(
            f"profile{'s' if len(orphans) > 1 else ''} {', '.join(orphans)} would name no"
            f" pool {change}",
            fix="point those profiles at another pool first (their `[[profiles]]` in the fleet"
            " file and `tp fleet apply FILE`, or POST /v1/profiles)",
            field="name",
        )


# pools


async def add_pool(ctx: Context, principal: Principal, pool: Pool) -> Pool:
    """Create a pool; an existing name is a Conflict (change it with ``update_pool``)."""
    require(principal, OPERATORS, "change the fleet")
    check_pool(pool)
    async with ctx.units.fleet() as uow:
        if any(p.name == pool.name for p in await uow.fleet.pools()):
            raise Conflict(
                f"pool {pool.name} already exists",
                fix=f"change it with `tp fleet pool set {pool.name}`",
                field="name",
            )
        await uow.fleet.put_pool(pool)
        await uow.commit()
    return pool


async def put_pool(ctx: Context, principal: Principal, pool: Pool) -> bool:
    """Create or replace a pool. Returns True when it was created. Changing the node shape or
    backend of a pool with live reservations is a Conflict."""
    require(principal, OPERATORS, "change the fleet")
    check_pool(pool)
    async with ctx.units.fleet() as uow:
        before = await uow.fleet.pools()
        created = not any(p.name == pool.name for p in before)
        await uow.fleet.put_pool(pool)
        await refuse_orphaned_profiles(uow, before, f"after this change to pool {pool.name}")
        await uow.commit()
    return created


async def update_pool(
    ctx: Context,
    principal: Principal,
    name: str,
    *,
    fleet: str | Keep = KEEP,
    backend: str | Keep = KEEP,
    gpus_per_node: int | Keep = KEEP,
    cpus_per_node: float | Keep = KEEP,
    memory_mb_per_node: int | Keep = KEEP,
    gpu_model: str | Keep | None = KEEP,
    description: str | Keep = KEEP,
) -> Pool:
    """Change some fields of a pool, in one transaction."""
    require(principal, OPERATORS, "change the fleet")
    changes = {
        k: v
        for k, v in {
            "fleet": fleet,
            "backend": backend,
            "gpus_per_node": gpus_per_node,
            "cpus_per_node": cpus_per_node,
            "memory_mb_per_node": memory_mb_per_node,
            "gpu_model": gpu_model,
            "description": description,
        }.items()
        if not isinstance(v, Keep)
    }
    async with ctx.units.fleet() as uow:
        before = await uow.fleet.pools()
        old = next((p for p in before if p.name == name), None)
        if old is None:
            raise NotFound(
                f"no pool {name}", fix="see `tp fleet ls`, or add it with `tp fleet pool add`"
            )
        pool = check_pool(dataclasses.replace(old, **changes))  # type: ignore[arg-type]
        await uow.fleet.put_pool(pool)
        await refuse_orphaned_profiles(uow, before, f"after this change to pool {name}")
        await uow.commit()
    return pool


# nodes


async def _require_pool(uow: FleetUnit, name: str, field: str) -> Pool:
    pools = await uow.fleet.pools()
    found = next((p for p in pools if p.name == name), None)
    if found is None:
        raise NotFound(
            f"no pool {name}",
            fix="create it first with `tp fleet pool add`; pools: "
            + (", ".join(p.name for p in pools) or "none"),
            field=field,
        )
    return found


async def add_node(ctx: Context, principal: Principal, name: str, pool: str) -> Node:
    """Add a node to a pool: schedulable, and connected unless its daemon must say so first
    (``domain.fleet.new_node``). An existing node name is a Conflict."""
    require(principal, OPERATORS, "change the fleet")
    check_name(name, "node name", "name")
    async with ctx.units.fleet() as uow:
        found = await _require_pool(uow, pool, "pool")
        if await uow.fleet.node(name) is not None:
            raise Conflict(
                f"node {name} already exists",
                fix=f"move it with `tp fleet node set {name} --pool P`, or choose another name",
                field="name",
            )
        node = new_node(name, found)
        await uow.fleet.put_node(node)
        await uow.commit()
    return node


async def put_node(ctx: Context, principal: Principal, name: str, pool: str) -> Node:
    """Create a node, or move it to ``pool``; an existing node keeps its scheduling state and
    connectivity. Moving a node with live reservations is a Conflict."""
    require(principal, OPERATORS, "change the fleet")
    check_name(name, "node name", "name")
    async with ctx.units.fleet() as uow:
        found = await _require_pool(uow, pool, "pool")
        old = await uow.fleet.node(name)
        node = dataclasses.replace(old, pool=pool) if old else new_node(name, found)
        await uow.fleet.put_node(node)
        await uow.commit()
    return node


async def set_node_state(ctx: Context, principal: Principal, name: str, sched: SchedState) -> Node:
    """Cordon (no new work), drain (no new work; the operator wants it empty) or uncordon a
    node. Running work stays; connectivity is not touched (a lost node stays lost)."""
    require(principal, OPERATORS, "cordon, drain or uncordon nodes")
    async with ctx.units.fleet() as uow:
        if await uow.fleet.node(name) is None:
            raise NotFound(f"no node {name}", fix="see `tp fleet ls`", field="name")
        node = await uow.fleet.set_node_state(name, sched=sched, at=ctx.clock.now())
        await uow.commit()
    return node


# the fleet as `tp fleet ls` shows it


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node: Node
    gpus_used: int = 0
    cpus_used: float = 0.0
    memory_mb_used: int = 0
    members: int = 0  # members holding a reservation on it


@dataclass(frozen=True, slots=True)
class PoolStatus:
    pool: Pool
    nodes: tuple[NodeStatus, ...]
    last_check: PoolCheck | None = None  # node pools: its last `tp fleet check`

    @property
    def gpus_total(self) -> int:
        return self.pool.gpus_per_node * len(self.nodes)

    @property
    def gpus_used(self) -> int:
        return sum(n.gpus_used for n in self.nodes)


async def connectivity_history(ctx: Context, per_node: int) -> dict[str, list[ConnectivityChange]]:
    """Every node's last ``per_node`` connectivity changes, newest first (the Fleet page's
    history strip): one bounded read, ``per_node`` × the nodes."""
    async with ctx.units.fleet() as uow:
        return await uow.fleet.connectivity_history(per_node)


async def list_fleet(ctx: Context) -> list[PoolStatus]:
    """Every pool (by fleet, then name) with its nodes, their states and what live
    reservations hold on each, and a node pool's last check."""
    async with ctx.units.fleet() as uow:
        pools = await uow.fleet.pools()
        nodes = await uow.fleet.nodes()
        live = await uow.reservations.live()
        checks = {
            p.name: await uow.checks.latest(p.name) for p in pools if p.backend == NODE_BACKEND
        }
    used: dict[str, list[int]] = {}
    for r in live:
        for a in r.assignments:
            u = used.setdefault(a.node, [0, 0, 0, 0])
            u[0] += len(a.gpus)
            u[1] += a.mcpu
            u[2] += a.memory_mb
            u[3] += 1
    out = []
    for pool in sorted(pools, key=lambda p: (p.fleet, p.name)):
        statuses = []
        for n in nodes:
            if n.pool == pool.name:
                g, m, mem, k = used.get(n.name, [0, 0, 0, 0])
                statuses.append(NodeStatus(n, g, m / 1000, mem, k))
        out.append(PoolStatus(pool, tuple(statuses), checks.get(pool.name)))
    return out


# profiles


async def put_profile(ctx: Context, principal: Principal, profile: Profile) -> Profile:
    """Create or replace a named profile. Its request must resolve against the current pools,
    and its name must not shadow an implicit request (``cpu``, a GPU model)."""
    require(principal, OPERATORS, "define profiles")
    async with ctx.units.fleet() as uow:
        # held until commit, so a pool's removal checking the profiles cannot miss this one
        pools = await uow.fleet.held_pools()
        check_profile(profile, pools)
        await uow.fleet.put_profile(profile)
        await uow.commit()
    return profile


def check_profile(profile: Profile, pools: list[Pool]) -> None:
    check_name(profile.name, "profile name", "name")
    reserved = {"cpu"} | {p.gpu_model for p in pools if p.gpu_model}
    if profile.name in reserved:
        raise InvalidInput(
            f"profile name {profile.name!r} would hide the request {profile.name!r}",
            fix=f"choose a name that is not `cpu` or a GPU model (e.g. {profile.name}-node)",
            field="name",
        )
    check_text(profile.description, "description")
    if len(profile.request) > 128:
        raise InvalidInput(
            "a profile's request is at most 128 characters",
            fix="write MODEL:N, MODEL, cpu:N or POOL/…",
            field="request",
        )
    resolve_request(profile.request, pools, "request")


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """One line of `tp profiles`: a named profile, or an implicit request form of a pool.

    ``members`` and ``resources`` (per member) are given for a form that stands for one
    request; ``max_count`` for a form with a count N (``h200:N``, ``cpu:N``)."""

    name: str
    kind: str  # "named" or "implicit"
    request: str
    pool: str
    backend: str
    description: str
    members: int | None = None
    resources: Resources | None = None
    max_count: float | None = None


async def list_profiles(ctx: Context) -> list[ProfileEntry]:
    """Named profiles (by name), then each pool's implicit request forms."""
    async with ctx.units.fleet() as uow:
        pools = await uow.fleet.pools()
        nodes = await uow.fleet.nodes()
        named = await uow.fleet.profiles()
    out = []
    for p in named:
        try:
            pool, members, res = resolve_request(p.request, pools, "request")
        except InvalidInput as exc:
            out.append(ProfileEntry(p.name, "named", p.request, "", "", f"does not resolve: {exc}"))
            continue
        out.append(
            ProfileEntry(
                p.name, "named", p.request, pool.name, pool.backend, p.description, members, res
            )
        )
    counts = {p.name: sum(1 for n in nodes if n.pool == p.name) for p in pools}
    for pool in pools:
        out.extend(_implicit(pool, pools, counts[pool.name]))
    return out


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _implicit(pool: Pool, pools: list[Pool], nodes: int) -> list[ProfileEntry]:
    note = "" if nodes else " (the pool has no nodes yet)"
    if not pool.is_gpu:
        shared = sum(1 for p in pools if not p.is_gpu) > 1
        name = f"{pool.name}/cpu:N" if shared else "cpu:N"
        text = (
            f"N CPUs, up to {_num(pool.cpus_per_node)} (in steps of 0.01), with "
            f"{pool.memory_mb_per_node // max(int(pool.cpus_per_node), 1)} MiB per CPU{note}"
        )
        return [
            ProfileEntry(
                name, "implicit", name, pool.name, pool.backend, text,
                max_count=pool.cpus_per_node,
            )
        ]  # fmt: skip
    model = pool.gpu_model or ""
    shared = sum(1 for p in pools if p.gpu_model == model) > 1
    prefix = f"{pool.name}/" if shared else ""
    g = pool.gpus_per_node
    whole = min(nodes, MAX_MEMBERS)
    multiples = [g * k for k in range(2, whole + 1)]
    text = f"N {model} GPUs: 1 to {g} on one node"
    if multiples:
        shown = ", ".join(map(str, multiples[:4])) + (", …" if len(multiples) > 4 else "")
        text += f", or {shown} (whole nodes, up to {g * whole})"
    whole_res = Resources(pool.cpus_per_node, pool.memory_mb_per_node, g, pool.gpu_model)
    return [
        ProfileEntry(
            f"{prefix}{model}", "implicit", f"{prefix}{model}", pool.name, pool.backend,
            f"one whole node: {g} {model} GPUs{note}", 1, whole_res,
        ),
        ProfileEntry(
            f"{prefix}{model}:N", "implicit", f"{prefix}{model}:N", pool.name, pool.backend,
            text + note, max_count=float(g * max(whole, 1)),
        ),
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Resolution:
    roles: tuple[RoleSpec, ...]
    backend: str


async def resolve_profiles(ctx: Context, texts: list[str]) -> Resolution:
    """What ``--profile`` values mean here (the same resolution a preview makes)."""
    async with ctx.units.fleet() as uow:
        pools = await uow.fleet.pools()
        named = await uow.fleet.profiles()
    roles = resolve_roles(texts, pools, named)
    backend = next(p.backend for p in pools if p.name == roles[0].pool)
    return Resolution(roles, backend)
