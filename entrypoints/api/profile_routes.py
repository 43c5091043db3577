"""HTTP routes of profiles: the operator's named ones and each pool's implicit request forms,
and what ``--profile`` values resolve to. Reading is for every user; changing is for admins
and operators (the use cases check)."""

from __future__ import annotations

from typing import Annotated

from litestar import get, post
from litestar.datastructures import State
from litestar.params import JSONBody, QueryParameter
from msgspec import Meta, Struct

from application import fleet
from domain.requests import Profile
from entrypoints.api.fleet_routes import JSON_LIMIT, ResourcesOut, ctx_of, resources_out
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller
from entrypoints.fleet_config import Text
from entrypoints.wire import Name


class ProfileOut(Struct):
    name: str
    kind: str  # named or implicit
    request: str
    pool: str
    backend: str
    description: str
    members: int | None = None
    resources: ResourcesOut | None = None  # per member
    max_count: float | None = None


class ProfileIn(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    request: Annotated[str, Meta(min_length=1, max_length=128)]
    description: Text = ""


class RoleOut(Struct):
    name: str
    profile: str
    pool: str
    members: int
    resources: ResourcesOut


class ResolutionOut(Struct):
    backend: str
    roles: list[RoleOut]


@get(
    "/v1/profiles",
    responses=responses(400, 401),
    summary="Profiles: the operator's named ones, then each pool's implicit request forms",
)
async def list_profiles(state: State, principal: Caller) -> list[ProfileOut]:
    return [
        ProfileOut(
            e.name, e.kind, e.request, e.pool, e.backend, e.description, e.members,
            resources_out(e.resources) if e.resources else None, e.max_count,
        )
        for e in await fleet.list_profiles(ctx_of(state))
    ]  # fmt: skip


@post(
    "/v1/profiles",
    status_code=200,
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 422),
    summary="Create or replace a named profile (admin, operator)",
)
async def put_profile(data: JSONBody[ProfileIn], state: State, principal: Caller) -> ProfileOut:
    profile = Profile(data.name, data.request, data.description)
    await fleet.put_profile(ctx_of(state), principal, profile)
    entry = next(e for e in await fleet.list_profiles(ctx_of(state)) if e.name == data.name)
    return ProfileOut(
        entry.name, entry.kind, entry.request, entry.pool, entry.backend, entry.description,
        entry.members, resources_out(entry.resources) if entry.resources else None,
    )  # fmt: skip


@get(
    "/v1/profiles/resolve",
    responses=responses(400, 401, 422),
    summary="What --profile values mean here (the resolution a preview makes)",
)
async def resolve_profiles(
    state: State,
    principal: Caller,
    profile: Annotated[
        list[Annotated[str, Meta(min_length=1, max_length=128)]],
        QueryParameter(name="profile", min_items=1, max_items=16),
    ],
) -> ResolutionOut:
    r = await fleet.resolve_profiles(ctx_of(state), list(profile))
    roles = [
        RoleOut(x.name, x.profile, x.pool, x.members, resources_out(x.resources)) for x in r.roles
    ]
    return ResolutionOut(r.backend, roles)


PROFILE_ROUTES = [list_profiles, put_profile, resolve_profiles]
