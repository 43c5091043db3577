"""HTTP routes of the fleet: pools, nodes, the fleet listing and whole-file apply (profiles:
``profile_routes.py``).

Reading is for every user; changing is for admins and operators (the use cases check).
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from litestar import Response, delete, get, patch, post, put
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Struct, UnsetType

from application import fleet, fleet_removal
from application.context import Context
from application.fleet_config import apply_fleet_config
from application.policy import KEEP, Keep
from domain.catalog import Resources
from domain.fleet import Node, Pool, SchedState
from entrypoints.api.node_routes import (
    CheckOut,
    GpuInventoryOut,
    check_out,
    gpu_inventory_out,
)
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller
from entrypoints.fleet_config import Backend, Cpus, FleetFile, Gpus, MemoryMb, Text
from entrypoints.wire import Name

T = TypeVar("T")
JSON_LIMIT = 1024 * 1024
FILE_LIMIT = 4 * 1024 * 1024


class PoolIn(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    fleet: Name = "default"
    backend: Backend
    gpu_model: Name | None = None
    gpus_per_node: Gpus = 0
    cpus_per_node: Cpus
    memory_mb_per_node: MemoryMb
    description: Text = ""

    def to_pool(self, name: str | None = None) -> Pool:
        return Pool(
            name or self.name, self.fleet, self.backend, self.gpus_per_node,
            self.cpus_per_node, self.memory_mb_per_node, self.gpu_model, self.description,
        )  # fmt: skip


class PoolPutIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """A whole pool definition; the name comes from the path."""

    fleet: Name = "default"
    backend: Backend
    gpu_model: Name | None = None
    gpus_per_node: Gpus = 0
    cpus_per_node: Cpus
    memory_mb_per_node: MemoryMb
    description: Text = ""


class PoolPatchIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """Only the fields given change; ``gpu_model: null`` makes it a CPU pool."""

    fleet: Name | UnsetType = UNSET
    backend: Backend | UnsetType = UNSET
    gpu_model: Name | UnsetType | None = UNSET
    gpus_per_node: Gpus | UnsetType = UNSET
    cpus_per_node: Cpus | UnsetType = UNSET
    memory_mb_per_node: MemoryMb | UnsetType = UNSET
    description: Text | UnsetType = UNSET


class PoolOut(Struct):
    name: str
    fleet: str
    backend: str
    gpu_model: str | None
    gpus_per_node: int
    cpus_per_node: float
    memory_mb_per_node: int
    description: str


class NodeIn(Struct, forbid_unknown_fields=True):
    name: Name
    pool: Name


class NodePutIn(Struct, forbid_unknown_fields=True):
    pool: Name


class NodeOut(Struct):
    name: str
    pool: str
    sched: str  # schedulable, cordoned, draining
    connectivity: str  # connected, disconnected, lost
    eligible: bool  # takes new work now
    validation: str  # unchecked, passed, failed: its result in its pool's last check
    validation_reason: str
    validated_at: datetime | None  # when that check ended
    sched_changed_at: datetime | None = None  # when sched last changed (null: not known)
    connectivity_changed_at: datetime | None = None  # when connectivity last changed


class NodeStatusOut(Struct):
    name: str
    pool: str
    sched: str
    connectivity: str
    eligible: bool
    gpus_total: int
    gpus_used: int
    cpus_total: float
    cpus_used: float
    memory_mb_total: int
    memory_mb_used: int
    members: int
    validation: str
    validation_reason: str
    validated_at: datetime | None
    # the GPUs its daemon detected, as its latest control stream reported them (node pools;
    # None: no GPU detected, an older daemon, or a backend that reports none)
    gpu_inventory: GpuInventoryOut | None = None
    sched_changed_at: datetime | None = None  # when sched last changed (null: not known)
    connectivity_changed_at: datetime | None = None  # when connectivity last changed


class PoolStatusOut(Struct):
    name: str
    fleet: str
    backend: str
    gpu_model: str | None
    gpus_per_node: int
    cpus_per_node: float
    memory_mb_per_node: int
    description: str
    gpus_total: int
    gpus_used: int
    nodes: list[NodeStatusOut]
    last_check: CheckOut | None  # node pools: the last `tp fleet check`, with its per-node results
    # why it takes no new work although configured (its backend does not report it, e.g. a
    # Slurm partition that does not exist), with the fix; "" when reported
    unavailable: str = ""


class FleetOut(Struct):
    pools: list[PoolStatusOut]


class ResourcesOut(Struct):
    cpus: float
    memory_mb: int
    gpus: int
    gpu_model: str | None


class ApplyOut(Struct):
    created: list[str]
    changed: list[str]
    unchanged: int


def ctx_of(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _wake(state: State) -> None:
    supervisor = state.get("supervisor")
    if supervisor is not None:
        supervisor.wake()


def pool_out(p: Pool) -> PoolOut:
    return PoolOut(
        p.name, p.fleet, p.backend, p.gpu_model, p.gpus_per_node, p.cpus_per_node,
        p.memory_mb_per_node, p.description,
    )  # fmt: skip


def node_out(n: Node) -> NodeOut:
    return NodeOut(
        n.name,
        n.pool,
        str(n.sched),
        str(n.connectivity),
        n.eligible,
        str(n.validation),
        n.validation_reason,
        n.validated_at,
        n.sched_changed_at,
        n.connectivity_changed_at,
    )


def resources_out(r: Resources) -> ResourcesOut:
    return ResourcesOut(r.cpus, r.memory_mb, r.gpus, r.gpu_model)


@get("/v1/fleet", responses=responses(400, 401), summary="Pools with their nodes, states and usage")
async def read_fleet(state: State, principal: Caller) -> FleetOut:
    out = []
    async with ctx_of(state).units.nodes() as uow:
        inventories = {link.node: link.capacity.gpu_inventory for link in await uow.links.all()}
    for ps in await fleet.list_fleet(ctx_of(state)):
        p = ps.pool
        nodes = [
            NodeStatusOut(
                n.node.name, n.node.pool, str(n.node.sched), str(n.node.connectivity),
                n.node.eligible, p.gpus_per_node, n.gpus_used, p.cpus_per_node, n.cpus_used,
                p.memory_mb_per_node, n.memory_mb_used, n.members, str(n.node.validation),
                n.node.validation_reason, n.node.validated_at,
                gpu_inventory_out(inventories.get(n.node.name)),
                n.node.sched_changed_at, n.node.connectivity_changed_at,
            )
            for n in ps.nodes
        ]  # fmt: skip
        out.append(
            PoolStatusOut(
                p.name, p.fleet, p.backend, p.gpu_model, p.gpus_per_node, p.cpus_per_node,
                p.memory_mb_per_node, p.description, ps.gpus_total, ps.gpus_used, nodes,
                check_out(ps.last_check) if ps.last_check else None, p.unavailable,
            )
        )  # fmt: skip
    return FleetOut(out)


@post(
    "/v1/fleet/apply",
    status_code=200,
    request_max_body_size=FILE_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Apply a whole fleet file (docs/fleet.md) in one transaction (admin, operator)",
)
async def apply(data: JSONBody[FleetFile], state: State, principal: Caller) -> ApplyOut:
    summary = await apply_fleet_config(ctx_of(state), data.to_config(), principal)
    _wake(state)
    return ApplyOut(list(summary.created), list(summary.changed), summary.unchanged)


@post(
    "/v1/pools",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 409, 422),
    summary="Create a pool (admin, operator)",
)
async def create_pool(data: JSONBody[PoolIn], state: State, principal: Caller) -> PoolOut:
    return pool_out(await fleet.add_pool(ctx_of(state), principal, data.to_pool()))


@put(
    "/v1/pools/{name:str}",
    request_max_body_size=JSON_LIMIT,
    responses={
        201: ResponseSpec(PoolOut, description="the pool was created"),
        **responses(400, 401, 403, 409, 422),
    },
    summary="Create or replace a pool (admin, operator)",
)
async def replace_pool(
    name: FromPath[str], data: JSONBody[PoolPutIn], state: State, principal: Caller
) -> Response[PoolOut]:
    pool = Pool(
        name, data.fleet, data.backend, data.gpus_per_node, data.cpus_per_node,
        data.memory_mb_per_node, data.gpu_model, data.description,
    )  # fmt: skip
    created = await fleet.put_pool(ctx_of(state), principal, pool)
    _wake(state)
    return Response(pool_out(pool), status_code=201 if created else 200)


def _keep(value: T | UnsetType) -> T | Keep:
    return KEEP if isinstance(value, UnsetType) else value


@patch(
    "/v1/pools/{name:str}",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Change some fields of a pool (admin, operator)",
)
async def update_pool(
    name: FromPath[str], data: JSONBody[PoolPatchIn], state: State, principal: Caller
) -> PoolOut:
    pool = await fleet.update_pool(
        ctx_of(state),
        principal,
        name,
        fleet=_keep(data.fleet),
        backend=_keep(data.backend),
        gpu_model=_keep(data.gpu_model),
        gpus_per_node=_keep(data.gpus_per_node),
        cpus_per_node=_keep(data.cpus_per_node),
        memory_mb_per_node=_keep(data.memory_mb_per_node),
        description=_keep(data.description),
    )
    _wake(state)
    return pool_out(pool)


@delete(
    "/v1/pools/{name:str}",
    status_code=200,
    responses=responses(400, 401, 403, 404, 409),
    summary="Remove a pool that has no nodes, with its checks and join tokens (admin, operator)",
)
async def remove_pool(name: FromPath[str], state: State, principal: Caller) -> PoolOut:
    return pool_out(await fleet_removal.remove_pool(ctx_of(state), principal, name))


@post(
    "/v1/nodes",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Add a node to a pool (admin, operator)",
)
async def create_node(data: JSONBody[NodeIn], state: State, principal: Caller) -> NodeOut:
    node = await fleet.add_node(ctx_of(state), principal, data.name, data.pool)
    _wake(state)
    return node_out(node)


@put(
    "/v1/nodes/{name:str}",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Create a node or move it to another pool; its states are kept (admin, operator)",
)
async def replace_node(
    name: FromPath[str], data: JSONBody[NodePutIn], state: State, principal: Caller
) -> NodeOut:
    node = await fleet.put_node(ctx_of(state), principal, name, data.pool)
    _wake(state)
    return node_out(node)


@delete(
    "/v1/nodes/{name:str}",
    status_code=200,
    responses=responses(400, 401, 403, 404, 409),
    summary="Remove a node that holds no work and whose daemon is not connected, with its"
    " credentials (admin, operator)",
)
async def remove_node(name: FromPath[str], state: State, principal: Caller) -> NodeOut:
    return node_out(await fleet_removal.remove_node(ctx_of(state), principal, name))


async def _set_state(state: State, principal: Caller, name: str, sched: SchedState) -> NodeOut:
    node = await fleet.set_node_state(ctx_of(state), principal, name, sched)
    _wake(state)
    return node_out(node)


_STATE_RESPONSES = responses(400, 401, 403, 404)


@post("/v1/nodes/{name:str}/cordon", status_code=200, responses=_STATE_RESPONSES,
      summary="Cordon a node: no new work; running work stays (admin, operator)")  # fmt: skip
async def cordon(name: FromPath[str], state: State, principal: Caller) -> NodeOut:
    return await _set_state(state, principal, name, SchedState.CORDONED)


@post("/v1/nodes/{name:str}/drain", status_code=200, responses=_STATE_RESPONSES,
      summary="Drain a node: no new work, to be emptied (admin, operator)")  # fmt: skip
async def drain(name: FromPath[str], state: State, principal: Caller) -> NodeOut:
    return await _set_state(state, principal, name, SchedState.DRAINING)


@post("/v1/nodes/{name:str}/uncordon", status_code=200, responses=_STATE_RESPONSES,
      summary="Make a node schedulable again (admin, operator)")  # fmt: skip
async def uncordon(name: FromPath[str], state: State, principal: Caller) -> NodeOut:
    return await _set_state(state, principal, name, SchedState.SCHEDULABLE)


FLEET_ROUTES = [
    read_fleet,
    apply,
    create_pool,
    replace_pool,
    update_pool,
    remove_pool,
    create_node,
    replace_node,
    remove_node,
    cordon,
    drain,
    uncordon,
]
