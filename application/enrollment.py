"""Node identity: join tokens, enrollment, control credentials and their rotation.

An operator creates a short-lived, one-time join token for a node pool (`tp node token create`).
A node daemon trades it once for a private control credential (``enroll``); the credential then
authenticates every control stream of that node (``authenticate_node``). Its gateway rotates it
over the stream (``rotate_credential`` then, once the node confirms it stored the new one,
``confirm_rotation``); the old one is refused after a grace period. Only hashes are stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from application.auth import hash_token
from application.context import Context
from application.node_sessions import check_address
from domain.auth import Principal, Role
from domain.catalog import check_name
from domain.enrollment import JOIN_TOKEN_TTL_MAX, JoinToken, NodeCredential
from domain.errors import Forbidden, InvalidInput, NotFound, Unauthenticated
from domain.fleet import NODE_BACKEND, Connectivity, Node, Pool, SchedState
from domain.node_protocol import NodeCapacity

JOIN_PREFIX = "tpj_"
CREDENTIAL_PREFIX = "tpn_"
JOIN_TOKEN_TTL_MIN = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Enrolled:
    node: str
    pool: str
    credential: str  # the secret: shown to the daemon once
    credential_id: str


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    node: str
    credential_id: str


async def create_join_token(
    ctx: Context,
    principal: Principal,
    pool: str,
    node_name: str | None = None,
    ttl: timedelta = timedelta(minutes=15),
) -> tuple[str, JoinToken]:
    """A one-time join token for a node of ``pool`` (a node-backend pool); returns the secret,
    shown once, and the stored token."""
    if principal.role not in (Role.ADMIN, Role.OPERATOR):
        raise Forbidden(
            f"user {principal.name} has role {principal.role}, which may not enroll nodes",
            fix="ask an operator or an admin",
        )
    if not JOIN_TOKEN_TTL_MIN <= ttl <= JOIN_TOKEN_TTL_MAX:
        raise InvalidInput(
            f"a join token's lifetime must be between 1 minute and 7 days, not {ttl}",
            fix="pass e.g. --ttl 15m; a short lifetime limits what a leaked token can do",
            field="ttl",
        )
    if node_name is not None:
        check_name(node_name, "node name", "node")
    secret = JOIN_PREFIX + ctx.new_secret()
    now = ctx.clock.now()
    token = JoinToken(hash_token(secret), pool, node_name, principal.name, now, now + ttl)
    async with ctx.units.node_fleet() as uow:
        _require_node_pool(_find(await uow.fleet.pools(), pool), pool)
        await uow.enrollment.add_join_token(token)
        await uow.commit()
    return secret, token


def _find(pools: list[Pool], name: str) -> Pool | None:
    return next((p for p in pools if p.name == name), None)


def _require_node_pool(pool: Pool | None, name: str) -> Pool:
    if pool is None:
        raise NotFound(f"no pool {name}", fix="see `tp fleet ls`", field="pool")
    if pool.backend != NODE_BACKEND:
        raise InvalidInput(
            f"pool {name} belongs to backend {pool.backend!r}; node daemons join "
            f"pools of backend {NODE_BACKEND!r}",
            fix=f"create one: `tp fleet pool add NAME --backend {NODE_BACKEND} ...`",
            field="pool",
        )
    return pool


def _check_capacity(pool: Pool, node: str, capacity: NodeCapacity) -> None:
    """A pool is homogeneous: a node must offer at least its pool's shape."""
    short: list[str] = []
    if capacity.gpus < pool.gpus_per_node:
        short.append(f"{capacity.gpus} GPUs (the pool's nodes have {pool.gpus_per_node})")
    if pool.gpu_model is not None and capacity.gpus and capacity.gpu_model != pool.gpu_model:
        short.append(f"GPU model {capacity.gpu_model} (the pool's is {pool.gpu_model})")
    if capacity.cpus + 1e-9 < pool.cpus_per_node:
        short.append(f"{capacity.cpus:g} CPUs (the pool's nodes have {pool.cpus_per_node:g})")
    if capacity.memory_mb < pool.memory_mb_per_node:
        short.append(
            f"{capacity.memory_mb} MiB of memory (the pool's nodes have {pool.memory_mb_per_node})"
        )
    if short:
        raise InvalidInput(
            f"node {node} reports " + "; ".join(short) + f", too little for pool {pool.name}",
            fix="enroll it with a token for a pool that matches this machine, or configure the "
            "daemon's capacity (`tp node run --gpus/--cpus/--memory-mb`) if detection is wrong",
            field="capacity",
        )


async def enroll(
    ctx: Context, secret: str, node_name: str, capacity: NodeCapacity, address: str
) -> Enrolled:
    """Trade a join token for a control credential: creates the node in the token's pool (or
    takes over an existing node of that name, whose old credentials stop working at once and
    whose live control session, if any, is closed).
    The token is used up only if everything else succeeds (one transaction)."""
    unusable = Unauthenticated(
        "the join token is unknown", fix="create one with `tp node token create --pool POOL`"
    )
    if not secret.startswith(JOIN_PREFIX):
        raise unusable
    now = ctx.clock.now()
    async with ctx.units.node_fleet() as uow:
        token = await uow.enrollment.join_token(hash_token(secret))
        if token is None:
            raise unusable
        why = token.why_unusable(now)
        if why is not None:
            raise Unauthenticated(why, fix="create a new one with `tp node token create`")
        name = token.node_name or node_name
        if token.node_name and node_name and node_name != token.node_name:
            raise InvalidInput(
                f"this join token is for node {token.node_name}, not {node_name[:80]!r}",
                fix=f"start the daemon with --name {token.node_name}, or use another token",
                field="node_name",
            )
        if not name:
            raise InvalidInput(
                "the node has no name", fix="start the daemon with --name NAME", field="node_name"
            )
        check_name(name, "node name", "node_name")
        check_address(address)  # what its Hellos will be held to
        pool = _require_node_pool(_find(await uow.fleet.pools(), token.pool), token.pool)
        _check_capacity(pool, name, capacity)
        existing = await uow.fleet.node(name)
        if existing is not None and existing.pool != pool.name:
            raise InvalidInput(
                f"node {name} already exists in pool {existing.pool}, not {pool.name}",
                fix="use a token for its pool, or choose another name",
                field="node_name",
            )
        if existing is None:
            await uow.fleet.put_node(
                Node(name, pool.name, SchedState.SCHEDULABLE, Connectivity.DISCONNECTED)
            )
        if not await uow.enrollment.use_join_token(token.token_hash, name, now):
            raise Unauthenticated(
                "the join token was used or expired meanwhile", fix="create a new one"
            )
        credential, stored = _new_credential(ctx, name)
        await uow.enrollment.add_credential(stored)
        await uow.enrollment.retire_credentials(name, stored.id, now)
        link = await uow.links.current(name)
        if link is not None and link.closed_at is None:
            # the live session used a credential revoked now (a copy, maybe): it is over, the
            # newly enrolled daemon may open one at once; its gateway ends the old stream
            await uow.links.close(name, link.session, now)
        await uow.commit()
    return Enrolled(name, pool.name, credential, stored.id)


def _new_credential(ctx: Context, node: str) -> tuple[str, NodeCredential]:
    secret = CREDENTIAL_PREFIX + ctx.new_secret()
    stored = NodeCredential(ctx.ids.new("cred"), node, hash_token(secret), ctx.clock.now())
    return secret, stored


async def authenticate_node(ctx: Context, secret: str | None) -> NodeIdentity:
    """The node a control credential belongs to; Unauthenticated if unknown or retired."""
    if not secret or not secret.startswith(CREDENTIAL_PREFIX):
        raise Unauthenticated(
            "no node credential given",
            fix="enroll the node first: `tp node run --join-token TOKEN ...`",
        )
    async with ctx.units.nodes() as uow:
        stored = await uow.enrollment.credential(hash_token(secret))
    if stored is None:
        raise Unauthenticated(
            "the node credential is unknown",
            fix="enroll the node again with a new join token (`tp node token create`)",
        )
    if not stored.valid(ctx.clock.now()):
        raise Unauthenticated(
            f"the credential of node {stored.node} was replaced and its grace period ended",
            fix="enroll the node again with a new join token (`tp node token create`)",
        )
    return NodeIdentity(stored.node, stored.id)


def rotation_due(created: NodeCredential, ctx: Context, every: timedelta) -> bool:
    return ctx.clock.now() - created.created_at >= every


async def current_credential(ctx: Context, identity: NodeIdentity) -> NodeCredential | None:
    async with ctx.units.nodes() as uow:
        for c in await uow.enrollment.credentials(identity.node):
            if c.id == identity.credential_id:
                return c
    return None


async def rotate_credential(ctx: Context, node: str) -> tuple[str, NodeCredential]:
    """A new credential for ``node``; the old ones keep working until ``confirm_rotation``."""
    secret, stored = _new_credential(ctx, node)
    async with ctx.units.nodes() as uow:
        await uow.enrollment.add_credential(stored)
        await uow.commit()
    return secret, stored


async def confirm_rotation(ctx: Context, node: str, credential_id: str, grace: timedelta) -> None:
    """The node stored ``credential_id``: every other credential of it ends after ``grace``."""
    async with ctx.units.nodes() as uow:
        ids = {c.id for c in await uow.enrollment.credentials(node)}
        if credential_id not in ids:
            raise NotFound(f"node {node} has no credential {credential_id}")
        await uow.enrollment.retire_credentials(node, credential_id, ctx.clock.now() + grace)
        await uow.commit()
