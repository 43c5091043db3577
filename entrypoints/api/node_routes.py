"""HTTP routes of the node backend: join tokens for new node daemons, the nodes' links and their
security events."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from litestar import get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, Parameter
from msgspec import Meta, Struct

from application import enrollment, fleet, fleet_check, node_sessions
from application.context import Context
from domain.errors import NotFound
from domain.fleet import CONNECTIVITY_KEPT
from domain.fleet_check import PoolCheck
from domain.gpus import GpuInventory
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller
from entrypoints.wire import Name

Ttl = Annotated[int, Meta(ge=60, le=7 * 24 * 3600)]


class JoinTokenIn(Struct, forbid_unknown_fields=True):
    pool: Name
    node: Name | None = None
    ttl_seconds: Ttl = 900


class JoinTokenOut(Struct):
    token: str
    pool: str
    node: str | None
    expires_at: datetime


class GpuDeviceOut(Struct):
    index: int
    uuid: str
    name: str  # the driver's product name, e.g. "NVIDIA H200"
    memory_mb: int
    mig: bool  # MIG mode enabled
    nvlink: bool  # at least one NVLink link active


class GpuInventoryOut(Struct):
    """The GPUs a node daemon detected (docs/fleet.md#gpu-inventory)."""

    devices: list[GpuDeviceOut]
    driver: str
    cuda: str
    source: str  # nvml, nvidia-smi, or recorded (TUNEPLANE_FAKE_NVML: a test or demo node)


def gpu_inventory_out(inv: GpuInventory | None) -> GpuInventoryOut | None:
    if inv is None:
        return None
    devices = [
        GpuDeviceOut(d.index, d.uuid, d.name, d.memory_mb, d.mig, d.nvlink) for d in inv.devices
    ]
    return GpuInventoryOut(devices, inv.driver, inv.cuda, inv.source)


class LinkOut(Struct):
    node: str
    connected_at: datetime
    heartbeat_at: datetime
    gateway: str
    address: str
    gpus: int
    gpu_model: str | None
    cpus: float
    memory_mb: int
    daemon_version: str
    epoch: int
    gpu_inventory: GpuInventoryOut | None = None  # None: none detected, or an older daemon


class NodeEventOut(Struct):
    node: str
    kind: str
    source: str
    first_at: datetime
    last_at: datetime
    count: int
    message: str


class CheckIn(Struct, forbid_unknown_fields=True):
    timeout_seconds: Annotated[int, Meta(ge=5, le=600)] = 40


class NodeResultOut(Struct):
    node: str
    ok: bool
    detail: str


class CheckOut(Struct):
    id: str
    pool: str
    job_id: str
    nodes: list[str]
    started_at: datetime
    finished_at: datetime | None
    ok: bool | None  # None while it runs
    note: str
    results: list[NodeResultOut]


def check_out(c: PoolCheck) -> CheckOut:
    return CheckOut(
        c.id,
        c.pool,
        c.job_id,
        list(c.nodes),
        c.started_at,
        c.finished_at,
        c.ok,
        c.note,
        [NodeResultOut(r.node, r.ok, r.detail) for r in c.results],
    )


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


@post(
    "/v1/node-tokens",
    status_code=201,
    responses=responses(400, 401, 403, 404, 422),
    summary="Create a one-time join token for a node daemon (operator); shown once",
)
async def create_join_token(
    data: JSONBody[JoinTokenIn], state: State, principal: Caller
) -> JoinTokenOut:
    secret, token = await enrollment.create_join_token(
        _ctx(state), principal, data.pool, data.node, timedelta(seconds=data.ttl_seconds)
    )
    return JoinTokenOut(secret, token.pool, token.node_name, token.expires_at)


@get(
    "/v1/node-links",
    responses=responses(401),
    summary="The control link of every node daemon: heartbeat, reported capacity, epoch",
)
async def node_links(state: State, principal: Caller) -> list[LinkOut]:
    async with _ctx(state).units.nodes() as uow:
        links = await uow.links.all()
    return [
        LinkOut(
            link.node,
            link.connected_at,
            link.heartbeat_at,
            link.gateway,
            link.address,
            link.capacity.gpus,
            link.capacity.gpu_model,
            link.capacity.cpus,
            link.capacity.memory_mb,
            link.daemon_version,
            link.epoch,
            gpu_inventory_out(link.capacity.gpu_inventory),
        )
        for link in links
    ]


@get(
    "/v1/nodes/{node:str}/events",
    responses=responses(400, 401, 403, 404, 422),
    summary="The node's security events, most recently seen first (operators): e.g. a second "
    "control session refused while its session was alive",
)
async def node_events(
    node: FromPath[str],
    state: State,
    principal: Caller,
    limit: Annotated[int, Parameter(ge=1, le=500)] = 100,
) -> list[NodeEventOut]:
    found = await node_sessions.node_events(_ctx(state), principal, node, limit)
    return [
        NodeEventOut(e.node, e.kind.value, e.source, e.first_at, e.last_at, e.count, e.message)
        for e in found
    ]


class ConnectivityChangeOut(Struct):
    at: datetime
    connectivity: str  # connected, disconnected, lost: what it became at that time


class NodeConnectivityOut(Struct):
    node: str
    changes: list[ConnectivityChangeOut]  # newest first


@get(
    "/v1/fleet/connectivity",
    responses=responses(400, 401, 422),
    summary="Each node's last connectivity changes, newest first (the Fleet page's history)",
)
async def connectivity_history(
    state: State,
    principal: Caller,
    per_node: Annotated[
        int,
        Parameter(
            ge=1,
            le=CONNECTIVITY_KEPT,
            description=f"changes per node (the store keeps {CONNECTIVITY_KEPT})",
        ),
    ] = 10,
) -> list[NodeConnectivityOut]:
    found = await fleet.connectivity_history(_ctx(state), per_node)
    return [
        NodeConnectivityOut(node, [ConnectivityChangeOut(c.at, str(c.connectivity)) for c in cs])
        for node, cs in found.items()
    ]


@post(
    "/v1/pools/{pool:str}/checks",
    status_code=201,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Check a node pool: peers reachable on the rendezvous ports, shared storage (operator)",
)
async def start_check(
    pool: FromPath[str], data: JSONBody[CheckIn], state: State, principal: Caller
) -> CheckOut:
    check = await fleet_check.start_check(_ctx(state), principal, pool, data.timeout_seconds)
    supervisor = state.supervisor
    if supervisor is not None:
        supervisor.wake()  # launch it now rather than at the next poll
    return check_out(check)


@get(
    "/v1/pools/{pool:str}/checks/latest",
    responses=responses(401, 404),
    summary="The pool's last check: running, or its result per node and when",
)
async def latest_check(pool: FromPath[str], state: State, principal: Caller) -> CheckOut:
    check = await fleet_check.latest(_ctx(state), pool)
    if check is None:
        raise NotFound(f"pool {pool} was never checked", fix=f"run `tp fleet check {pool}`")
    return check_out(check)


NODE_ROUTES = [
    create_join_token,
    node_links,
    node_events,
    connectivity_history,
    start_check,
    latest_check,
]
