"""HTTP routes. Each handler parses, calls one use case, and shapes the answer; nothing more."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import (
    FromPath,
    FromQuery,
    HeaderParameter,
    JSONBody,
    Parameter,
    QueryParameter,
)
from litestar.response import Stream

from application import archives, explain, jobs, submissions
from application.context import Context
from application.logs import stream_logs
from application.supervisor import Supervisor
from domain import tarball
from domain.errors import InvalidInput, NotFound
from domain.lifecycle import JobState
from entrypoints.api import schemas as s
from entrypoints.api.problems import responses
from entrypoints.api.security import Caller

JSON_LIMIT = 1024 * 1024


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _wake(state: State) -> None:
    supervisor: Supervisor | None = state.supervisor
    if supervisor is not None:
        supervisor.wake()


@post(
    "/v1/archives",
    status_code=201,
    request_max_body_size=None,
    responses=responses(400, 401, 403, 413, 422),
    summary="Upload a source archive (gzip-compressed tar)",
)
async def upload_archive(
    request: Request[Any, Any, Any],
    state: State,
    principal: Caller,
    content_digest: Annotated[str | None, HeaderParameter(name="X-Content-Digest")] = None,
) -> s.ArchiveOut:
    declared = request.headers.get("content-length")
    ref = await archives.upload_archive(
        _ctx(state),
        principal,
        request.stream(),
        declared_size=int(declared) if declared and declared.isdigit() else None,
        declared_digest=content_digest,
    )
    return s.ArchiveOut(ref.digest, ref.size)


@get(
    "/v1/archives/limits",
    responses=responses(401),
    summary="The limits a source archive upload must keep (say them before uploading)",
)
async def archive_limits(state: State, principal: Caller) -> s.ArchiveLimitsOut:
    limits = _ctx(state).limits
    return s.ArchiveLimitsOut(
        max_bytes=limits.max_archive_bytes,
        max_unpacked_bytes=limits.max_archive_unpacked_bytes,
        max_entries=tarball.MAX_SOURCE_ENTRIES,
        formats=["tar.gz", "tar"],
    )


@post(
    "/v1/previews",
    status_code=201,
    request_max_body_size=JSON_LIMIT,
    responses=responses(400, 401, 403, 404, 409, 422, 503),
    summary="Resolve a submission into an immutable preview (creates no job)",
)
async def create_preview(
    data: JSONBody[s.PreviewIn], state: State, principal: Caller
) -> s.PreviewOut:
    preview = await submissions.create_preview(_ctx(state), principal, data.to_intent())
    return s.preview_out(preview)


@get("/v1/previews/{preview_id:str}", responses=responses(400, 401, 404), summary="Read a preview")
async def read_preview(preview_id: FromPath[str], state: State, principal: Caller) -> s.PreviewOut:
    return s.preview_out(await submissions.get_preview(_ctx(state), principal, preview_id))


@post(
    "/v1/jobs",
    request_max_body_size=JSON_LIMIT,
    responses={
        201: ResponseSpec(s.ReceiptOut, description="a new job was created"),
        **responses(400, 401, 403, 404, 409, 410, 422, 503),
    },
    status_code=200,
    summary="Commit a preview: 201 with a new job, or 200 with the job an identical commit made",
)
async def commit(
    data: JSONBody[s.CommitIn], state: State, principal: Caller
) -> Response[s.ReceiptOut]:
    ctx = _ctx(state)
    receipt = await submissions.commit(ctx, principal, data.preview_id, data.digest, data.retry_key)
    if receipt.created:
        _wake(state)
    return Response(s.receipt_out(receipt), status_code=201 if receipt.created else 200)


@get("/v1/jobs", responses=responses(400, 401, 403, 422), summary="List jobs, newest first")
async def list_jobs(
    state: State,
    principal: Caller,
    job_state: Annotated[list[JobState] | None, QueryParameter(name="state")] = None,
    limit: Annotated[int, Parameter(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None,
        Parameter(max_length=200, description="next_cursor of the previous page, same filters"),
    ] = None,
    everyone: Annotated[
        bool, Parameter(description="every user's jobs (admins, operators, viewers)")
    ] = False,
    owner: Annotated[
        str | None,
        Parameter(
            min_length=1,
            max_length=200,
            description="this user's jobs (another user's: admins, operators, viewers)",
        ),
    ] = None,
    queue: Annotated[
        str | None, Parameter(min_length=1, max_length=200, description="jobs of this queue")
    ] = None,
    why: Annotated[
        bool,
        Parameter(description="say why each pending job waits (`waits`): one admission pass more"),
    ] = False,
    q: Annotated[
        str | None,
        Parameter(
            max_length=200,
            description="jobs whose experiment, id or owner holds this text (case-insensitive; "
            "% and _ match themselves)",
        ),
    ] = None,
) -> s.JobPageOut:
    ctx = _ctx(state)
    page = await jobs.list_jobs(
        ctx,
        principal,
        states=job_state,
        limit=limit,
        cursor=cursor,
        everyone=everyone,
        owner=owner,
        queue=queue,
        search=q,
    )
    pending = {j.id for j in page.jobs if j.state is JobState.PENDING}
    progress = await jobs.progress(ctx, page.jobs)
    ranks = await explain.queue_positions(ctx, pending)
    out = [s.job_out(j, progress=s.progress_out(j, progress.get(j.id), ranks)) for j in page.jobs]
    if why:
        waits = await explain.pending_waits(ctx, pending)
        out = [msgspec.structs.replace(j, waits=waits.get(j.id)) for j in out]
    return s.JobPageOut(out, page.next_cursor, ranks.pending_total if ranks else None)


@get("/v1/jobs/{job_id:str}", responses=responses(400, 401, 404), summary="A job with its attempts")
async def read_job(job_id: FromPath[str], state: State, principal: Caller) -> s.JobOut:
    details = await jobs.get_job(_ctx(state), principal, job_id)
    return s.job_out(details.job, details)


@get(
    "/v1/jobs/{job_id:str}/events",
    responses=responses(400, 401, 404, 422),
    summary="The job's timeline: its preview and every state transition, oldest first",
)
async def job_events(
    job_id: FromPath[str],
    state: State,
    principal: Caller,
    limit: Annotated[int, Parameter(ge=1, le=500)] = 200,
) -> s.JobEventsOut:
    stages = await jobs.job_timeline(_ctx(state), principal, job_id, limit)
    return s.JobEventsOut(
        job_id,
        [
            s.JobEventOut(x.stage, x.at, x.state.value if x.state else None, x.reason)
            for x in stages
        ],
    )


@post(
    "/v1/jobs/{job_id:str}/cancel",
    status_code=202,
    responses=responses(400, 401, 403, 404, 409),
    summary="Stop a job (idempotent)",
)
async def cancel(job_id: FromPath[str], state: State, principal: Caller) -> s.JobOut:
    details = await jobs.cancel_job(_ctx(state), principal, job_id)
    _wake(state)
    return s.job_out(details.job, details)


@get(
    "/v1/jobs/{job_id:str}/logs",
    media_type="text/plain",
    responses=responses(400, 401, 404, 422),
    summary="The job's stdout and stderr; with follow=true, until it ends",
)
async def logs(
    job_id: FromPath[str],
    state: State,
    principal: Caller,
    follow: FromQuery[bool] = False,
    member: Annotated[int, Parameter(ge=0, le=1024)] = 0,
) -> Stream:
    chunks = await stream_logs(_ctx(state), principal, job_id, follow=follow, member=member)
    return Stream(chunks, media_type="text/plain; charset=utf-8")


@get("/v1/methods", responses=responses(400, 401), summary="Methods (recipes) and their parameters")
async def list_methods(state: State, principal: Caller) -> list[s.MethodOut]:
    return [s.method_out(m) for m in _ctx(state).catalog.methods]


@get(
    "/v1/methods/{framework:str}/{method:str}",
    responses=responses(400, 401, 404),
    summary="One method, by its name <framework>/<method>",
)
async def read_method(
    framework: FromPath[str], method: FromPath[str], state: State, principal: Caller
) -> s.MethodOut:
    try:
        return s.method_out(_ctx(state).catalog.method(f"{framework}/{method}"))
    except InvalidInput as exc:
        raise NotFound(exc.message, fix=exc.fix) from None


@get("/v1/whoami", responses=responses(400, 401), summary="The caller's identity")
async def whoami(principal: Caller) -> s.WhoAmI:
    return s.WhoAmI(principal.name, str(principal.role), list(principal.teams))


PROTECTED = [
    upload_archive,
    archive_limits,
    create_preview,
    read_preview,
    commit,
    list_jobs,
    read_job,
    job_events,
    cancel,
    logs,
    list_methods,
    read_method,
    whoami,
]
