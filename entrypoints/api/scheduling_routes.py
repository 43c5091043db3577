"""HTTP routes of scheduling: why a job waits, and the operator's explicit reconciliation."""

from __future__ import annotations

from typing import Annotated

from litestar import get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody
from msgspec import Meta, Struct

from application import explain, reconcile
from application.context import Context
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller

Reason = Annotated[str, Meta(min_length=1, max_length=500)]


class WhyOut(Struct):
    job_id: str
    state: str
    kind: str
    text: str
    position: int | None = None
    pending_total: int | None = None
    # what each attempt resumed from, and the checkpoints skipped as not verifying
    checkpoints: list[str] = []


class PlacementOut(Struct):
    role: str
    request: str
    pool: str
    fleet: str | None
    backend: str | None


class WaitOut(Struct):
    preview_id: str
    starts_now: bool
    kind: str
    text: str
    position: int
    pending_total: int
    ahead: int
    placements: list[PlacementOut]


class ReasonIn(Struct, forbid_unknown_fields=True):
    reason: Reason


class NodeLostOut(Struct):
    node: str
    members_failed: int


class ReleaseOut(Struct):
    attempt_id: str
    released: bool


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


@get(
    "/v1/jobs/{job_id:str}/why",
    responses=responses(400, 401, 404),
    summary="Why a job waits, or what it holds",
)
async def why(job_id: FromPath[str], state: State, principal: Caller) -> WhyOut:
    e = await explain.explain_job(_ctx(state), principal, job_id)
    return WhyOut(
        e.job_id, e.state, e.kind, e.text, e.position, e.pending_total, list(e.checkpoints)
    )


@get(
    "/v1/previews/{preview_id:str}/wait",
    responses=responses(400, 401, 404),
    summary="Estimated wait of a preview if committed now: start at once, or its queue position",
)
async def preview_wait(preview_id: FromPath[str], state: State, principal: Caller) -> WaitOut:
    e = await explain.estimate_wait(_ctx(state), principal, preview_id)
    return WaitOut(
        e.preview_id, e.starts_now, e.kind, e.text, e.position, e.pending_total, e.ahead,
        [PlacementOut(p.role, p.request, p.pool, p.fleet, p.backend) for p in e.placements],
    )  # fmt: skip


@post(
    "/v1/nodes/{name:str}/lost",
    status_code=200,
    responses=responses(400, 401, 403, 404, 409, 422),  # 409: lost a race five times
    summary="Declare a node lost: fence it and fail its unfinished members (operator)",
)
async def node_lost(
    name: FromPath[str], data: JSONBody[ReasonIn], state: State, principal: Caller
) -> NodeLostOut:
    failed = await reconcile.declare_node_lost(_ctx(state), principal, name, data.reason)
    _wake(state)
    return NodeLostOut(name, failed)


@post(
    "/v1/attempts/{attempt_id:str}/release",
    status_code=200,
    responses=responses(400, 401, 403, 404, 422),
    summary="Release an attempt's reservation after confirming its members stopped (operator)",
)
async def release(
    attempt_id: FromPath[str], data: JSONBody[ReasonIn], state: State, principal: Caller
) -> ReleaseOut:
    done = await reconcile.release_reservation(_ctx(state), principal, attempt_id, data.reason)
    _wake(state)
    return ReleaseOut(attempt_id, done)


def _wake(state: State) -> None:
    supervisor = state.get("supervisor")
    if supervisor is not None:
        supervisor.wake()


SCHEDULING_ROUTES = [why, preview_wait, node_lost, release]
