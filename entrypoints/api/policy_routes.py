"""HTTP routes of users, tokens, teams and queues.

Admins manage users; admins and operators manage teams and queues; everyone may list teams and
queues. The use cases check. Tokens: ``token_routes.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import get, patch, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody
from msgspec import UNSET, Meta, Struct, UnsetType

from application import policy
from application.context import Context
from domain.auth import Role, User
from domain.fleet import Queue
from domain.retry import MAX_ATTEMPTS
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller, TokenCache
from entrypoints.fleet_config import Quota
from entrypoints.wire import Name

JSON_LIMIT = 64 * 1024
Teams = Annotated[list[Name], Meta(max_length=64)]
Priority = Annotated[int, Meta(ge=-1000, le=1000)]
MaxAttempts = Annotated[
    int,
    Meta(ge=1, le=MAX_ATTEMPTS, description="caps the attempts of its jobs' retry policies"),
]


class UserIn(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    role: Role = Role.MEMBER
    teams: Teams = []


class UserPatchIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """``teams`` replaces the list; then ``add_teams`` and ``remove_teams`` apply."""

    role: Role | None = None
    teams: Teams | None = None
    add_teams: Teams = []
    remove_teams: Teams = []
    disabled: bool | None = None


class UserOut(Struct):
    name: str
    role: str
    teams: list[str]
    disabled: bool
    created_at: datetime | None


class TeamIn(Struct, forbid_unknown_fields=True):
    name: Name


class TeamOut(Struct):
    name: str


class QueueIn(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    team: Name
    priority: Priority = 0
    gpu_quota: Quota | None = None
    job_quota: Quota | None = None
    max_attempts: MaxAttempts | None = None


class QueuePatchIn(Struct, forbid_unknown_fields=True, kw_only=True):
    """Only the fields given change; a quota of ``null`` removes the cap."""

    team: Name | UnsetType = UNSET
    priority: Priority | UnsetType = UNSET
    gpu_quota: Quota | UnsetType | None = UNSET
    job_quota: Quota | UnsetType | None = UNSET
    max_attempts: MaxAttempts | UnsetType | None = UNSET


class QueueOut(Struct):
    name: str
    team: str
    priority: int
    gpu_quota: int | None
    job_quota: int | None
    max_attempts: int | None = None
    gpus_in_use: int = 0
    jobs_in_use: int = 0


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _wake(state: State) -> None:
    supervisor = state.get("supervisor")
    if supervisor is not None:
        supervisor.wake()


def user_out(u: User) -> UserOut:
    return UserOut(u.name, str(u.role), list(u.teams), u.disabled, u.created_at)


def queue_out(q: Queue, gpus: int = 0, jobs: int = 0) -> QueueOut:
    return QueueOut(
        q.name, q.team, q.priority, q.gpu_quota, q.job_quota, q.max_attempts, gpus, jobs
    )


@get("/v1/users", responses=responses(400, 401, 403), summary="Users (admin, operator)")
async def list_users(state: State, principal: Caller) -> list[UserOut]:
    return [user_out(u) for u in await policy.list_users(_ctx(state), principal)]


@post(
    "/v1/users",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Create a user with a role and teams (admin)",
)
async def create_user(data: JSONBody[UserIn], state: State, principal: Caller) -> UserOut:
    user = await policy.add_user(_ctx(state), principal, data.name, data.role, data.teams)
    return user_out(user)


@patch(
    "/v1/users/{name:str}",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Change a user's role or teams, or disable or enable it (admin)",
)
async def update_user(
    name: FromPath[str], data: JSONBody[UserPatchIn], state: State, principal: Caller
) -> UserOut:
    user = await policy.update_user(
        _ctx(state),
        principal,
        name,
        role=data.role,
        teams=data.teams,
        add_teams=data.add_teams,
        remove_teams=data.remove_teams,
        disabled=data.disabled,
    )
    cache: TokenCache = state.token_cache
    cache.clear()  # this process: the user's next request sees the change (others: the signal)
    return user_out(user)


@get("/v1/teams", responses=responses(400, 401), summary="Teams")
async def list_teams(state: State, principal: Caller) -> list[TeamOut]:
    return [TeamOut(t.name) for t in await policy.list_teams(_ctx(state))]


@post(
    "/v1/teams",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 409, 422),
    summary="Create a team (admin, operator)",
)
async def create_team(data: JSONBody[TeamIn], state: State, principal: Caller) -> TeamOut:
    return TeamOut((await policy.add_team(_ctx(state), principal, data.name)).name)


@get(
    "/v1/queues",
    responses=responses(400, 401),
    summary="Queues with their quotas and what their live reservations hold",
)
async def list_queues(state: State, principal: Caller) -> list[QueueOut]:
    return [
        queue_out(u.queue, u.gpus_in_use, u.jobs_in_use)
        for u in await policy.list_queues(_ctx(state))
    ]


@post(
    "/v1/queues",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422),
    summary="Create a queue of a team (admin, operator)",
)
async def create_queue(data: JSONBody[QueueIn], state: State, principal: Caller) -> QueueOut:
    queue = Queue(
        data.name, data.team, data.priority, data.gpu_quota, data.job_quota, data.max_attempts
    )
    return queue_out(await policy.add_queue(_ctx(state), principal, queue))


@patch(
    "/v1/queues/{name:str}",
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 422),
    summary="Change a queue's team, priority or quotas (admin, operator)",
)
async def update_queue(
    name: FromPath[str], data: JSONBody[QueuePatchIn], state: State, principal: Caller
) -> QueueOut:
    queue = await policy.update_queue(
        _ctx(state),
        principal,
        name,
        team=policy.KEEP if isinstance(data.team, UnsetType) else data.team,
        priority=policy.KEEP if isinstance(data.priority, UnsetType) else data.priority,
        gpu_quota=policy.KEEP if isinstance(data.gpu_quota, UnsetType) else data.gpu_quota,
        job_quota=policy.KEEP if isinstance(data.job_quota, UnsetType) else data.job_quota,
        max_attempts=policy.KEEP if isinstance(data.max_attempts, UnsetType) else data.max_attempts,
    )
    _wake(state)
    usage = next((u for u in await policy.list_queues(_ctx(state)) if u.queue.name == name), None)
    return queue_out(queue, usage.gpus_in_use if usage else 0, usage.jobs_in_use if usage else 0)


POLICY_ROUTES = [
    list_users,
    create_user,
    update_user,
    list_teams,
    create_team,
    list_queues,
    create_queue,
    update_queue,
]
