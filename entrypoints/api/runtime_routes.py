"""HTTP routes of the runtime registry (docs/runtimes.md): everyone may read it; admins add."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from litestar import Response, get, post
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody
from msgspec import Meta, Struct

from application import runtimes
from application.context import Context
from domain.catalog import RuntimeSpec
from domain.errors import InvalidInput, NotFound
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller
from entrypoints.wire import Digest, Name

ProcessModel = Literal["single-process", "torch-process-group", "ray", "cpu"]
FrameworkName = Annotated[str, Meta(min_length=1, max_length=100)]
Version = Annotated[str, Meta(min_length=1, max_length=64)]


class RuntimeIn(Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    image: Annotated[
        str,
        Meta(min_length=1, max_length=255, description="repo:tag, or repo@sha256:… (pinned)"),
    ]
    digest: Annotated[
        Digest | None,
        Meta(description="the image id or manifest digest it must be; else from image@sha256:"),
    ] = None
    python: Annotated[str, Meta(pattern=r"^[0-9]+\.[0-9]+$")] | None = None
    frameworks: Annotated[
        dict[FrameworkName, Version],
        Meta(max_length=32, description="Python distribution -> exact version"),
    ] = {}
    process_model: ProcessModel = "single-process"
    description: Annotated[str, Meta(max_length=500)] = ""
    replace: Annotated[
        bool, Meta(description="overwrite a runtime of that name with other content")
    ] = False

    def to_runtime(self) -> RuntimeSpec:
        return RuntimeSpec(
            name=self.name,
            image=self.image,
            python=self.python,
            process_model=self.process_model,
            description=self.description,
            digest=self.digest,
            frameworks=dict(self.frameworks),
        )


class RuntimeOut(Struct):
    name: str
    image: str
    python: str | None
    process_model: str
    description: str
    digest: str | None = None  # None: built in, pinned at preview to what the image names
    frameworks: dict[str, str] = {}
    builtin: bool = True
    added_by: str | None = None
    added_at: datetime | None = None
    revision: int = 0


class RuntimeAddOut(Struct):
    outcome: str  # created, replaced or unchanged
    runtime: RuntimeOut


def runtime_out(r: RuntimeSpec) -> RuntimeOut:
    return RuntimeOut(
        r.name, r.image, r.python, r.process_model, r.description, r.digest,
        dict(r.frameworks), r.builtin, r.added_by, r.added_at, r.revision,
    )  # fmt: skip


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


@get("/v1/runtimes", responses=responses(400, 401), summary="Runtimes (images and their contract)")
async def list_runtimes(state: State, principal: Caller) -> list[RuntimeOut]:
    return [runtime_out(r) for r in await runtimes.list_runtimes(_ctx(state))]


@get("/v1/runtimes/{name:str}", responses=responses(400, 401, 404), summary="One runtime")
async def read_runtime(name: FromPath[str], state: State, principal: Caller) -> RuntimeOut:
    try:
        return runtime_out(await runtimes.find_runtime(_ctx(state), name))
    except InvalidInput as exc:
        raise NotFound(exc.message, fix=exc.fix) from None


@post(
    "/v1/runtimes",
    status_code=200,
    request_max_body_size=64 * 1024,
    responses={
        201: ResponseSpec(RuntimeAddOut, description="the runtime was added"),
        **responses(400, 401, 403, 409, 422),
    },
    summary="Register a runtime pinned by digest (admin); 200 when it was replaced or unchanged",
)
async def add_runtime(
    data: JSONBody[RuntimeIn], state: State, principal: Caller
) -> Response[RuntimeAddOut]:
    added = await runtimes.add_runtime(
        _ctx(state), principal, data.to_runtime(), replace=data.replace
    )
    body = RuntimeAddOut(added.outcome, runtime_out(added.runtime))
    return Response(body, status_code=201 if added.outcome == "created" else 200)


RUNTIME_ROUTES = [list_runtimes, read_runtime, add_runtime]
