"""HTTP routes of plugins: publish (upload), list by group, read, disable and enable
(docs/plugins.md). Everyone reads; members publish workload plugins; admins publish the others,
and disable and enable."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter, JSONBody, Parameter
from msgspec import Meta, Struct

from application import plugins
from application.context import Context
from domain.plugins import CAPABILITIES, EXECUTES, GROUPS, PluginRecord
from entrypoints.api.problems import responses
from entrypoints.api.schemas import FileOut
from entrypoints.api.security import Caller

DIGEST = r"^sha256:[0-9a-f]{64}$"
NamePath = Annotated[str, Parameter(max_length=127)]
VersionPath = Annotated[str, Parameter(max_length=64)]


class CapabilityOut(Struct):
    name: str
    description: str


class DisabledOut(Struct):
    at: datetime
    by: str
    reason: str


class PluginOut(Struct, kw_only=True):
    name: str
    version: str
    group: str  # one of the groups (docs/plugins.md)
    executes: str  # "control-plane", "node" or "workload"
    executes_description: str
    description: str
    capabilities: list[CapabilityOut]
    entry: list[str]
    digest: str
    size: int
    files: int
    published_by: str
    published_at: datetime
    disabled: DisabledOut | None


class PluginDetailOut(PluginOut, kw_only=True):
    manifest: list[FileOut]


class GroupOut(Struct):
    group: str
    description: str
    plugins: list[PluginOut]


class PluginListOut(Struct):
    groups: list[GroupOut]


class VersionsOut(Struct):
    name: str
    versions: list[PluginOut]


class DisableIn(Struct, forbid_unknown_fields=True):
    reason: Annotated[str, Meta(min_length=1, max_length=500)]


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _fields(r: PluginRecord) -> dict[str, Any]:
    d = r.declaration
    caps = [CapabilityOut(c, CAPABILITIES.get(c, "")) for c in d.capabilities]
    off = DisabledOut(r.disabled.at, r.disabled.by, r.disabled.reason) if r.disabled else None
    return dict(
        name=d.name, version=d.version, group=d.group, executes=d.executes,
        executes_description=EXECUTES.get(d.executes, ""), description=d.description,
        capabilities=caps, entry=list(d.entry), digest=r.digest, size=r.size,
        files=len(r.manifest.files), published_by=r.published_by,
        published_at=r.published_at, disabled=off,
    )  # fmt: skip


def plugin_out(r: PluginRecord) -> PluginOut:
    return PluginOut(**_fields(r))


def detail_out(r: PluginRecord) -> PluginDetailOut:
    files = [FileOut(f.path, f.size, f.sha256) for f in r.manifest.files]
    return PluginDetailOut(**_fields(r), manifest=files)


@post(
    "/v1/plugins",
    request_max_body_size=None,
    responses={
        201: ResponseSpec(PluginDetailOut, description="the version was published"),
        **responses(400, 401, 403, 409, 413, 422),
    },
    status_code=200,
    summary="Publish a plugin package (a tar): 201 new, 200 the same files already published",
)
async def publish_plugin(
    request: Request[Any, Any, Any],
    state: State,
    principal: Caller,
    plugin_digest: Annotated[
        str | None,
        HeaderParameter(name="X-Plugin-Digest", pattern=DIGEST, description="the package's digest"),
    ] = None,
    content_digest: Annotated[
        str | None,
        HeaderParameter(name="X-Content-Digest", pattern=DIGEST, description="the body's sha256"),
    ] = None,
) -> Response[PluginDetailOut]:
    declared = request.headers.get("content-length")
    record, created = await plugins.publish(
        _ctx(state),
        principal,
        request.stream(),
        declared_size=int(declared) if declared and declared.isdigit() else None,
        declared_digest=plugin_digest,
        content_digest=content_digest,
    )
    return Response(detail_out(record), status_code=201 if created else 200)


@get(
    "/v1/plugins",
    responses=responses(400, 401, 422),
    summary="Published plugins grouped by purpose (every group, in order), newest version first",
)
async def list_plugins(
    state: State,
    principal: Caller,
    group: Annotated[str | None, Parameter(max_length=64)] = None,
) -> PluginListOut:
    found = await plugins.list_plugins(_ctx(state), principal, group)
    return PluginListOut(
        [
            GroupOut(g, text, [plugin_out(r) for r in found if r.declaration.group == g])
            for g, text in GROUPS.items()
            if group is None or g == group
        ]
    )


@get(
    "/v1/plugins/{name:str}",
    responses=responses(400, 401, 404, 422),
    summary="Every version of one plugin, newest first",
)
async def plugin_versions(name: NamePath, state: State, principal: Caller) -> VersionsOut:
    found = await plugins.plugin_versions(_ctx(state), principal, name)
    return VersionsOut(name, [plugin_out(r) for r in found])


@get(
    "/v1/plugins/{name:str}/{version:str}",
    responses=responses(400, 401, 404, 422),
    summary="One plugin version with its file manifest",
)
async def read_plugin(
    name: NamePath, version: VersionPath, state: State, principal: Caller
) -> PluginDetailOut:
    return detail_out(await plugins.get_plugin(_ctx(state), principal, name, version))


@post(
    "/v1/plugins/{name:str}/{version:str}/disable",
    status_code=200,
    request_max_body_size=16 * 1024,
    responses=responses(400, 401, 403, 404, 422),
    summary="Refuse a plugin version to new submissions (admins); committed jobs keep it",
)
async def disable_plugin(
    name: NamePath, version: VersionPath, data: JSONBody[DisableIn], state: State, principal: Caller
) -> PluginDetailOut:
    record = await plugins.disable(_ctx(state), principal, name, version, data.reason)
    return detail_out(record)


@post(
    "/v1/plugins/{name:str}/{version:str}/enable",
    status_code=200,
    responses=responses(400, 401, 403, 404, 422),
    summary="Offer a disabled plugin version to new submissions again (admins)",
)
async def enable_plugin(
    name: NamePath, version: VersionPath, state: State, principal: Caller
) -> PluginDetailOut:
    return detail_out(await plugins.enable(_ctx(state), principal, name, version))


PLUGIN_ROUTES = [
    publish_plugin,
    list_plugins,
    plugin_versions,
    read_plugin,
    disable_plugin,
    enable_plugin,
]
