"""HTTP routes of a job's artifacts: the recorded manifests, and verifying the files."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from urllib.parse import quote

from litestar import get, post
from litestar.datastructures import State
from litestar.params import FromPath, Parameter
from litestar.response import Stream
from msgspec import Struct

from application import artifacts
from application.artifact_download import download
from application.context import Context
from application.node_output_fetch import FETCH_WAIT
from application.node_outputs import SCAN_WAIT
from domain.artifacts import ArtifactRecord, check_artifact_path
from domain.errors import InvalidInput
from entrypoints.api.problems import MalformedRequest, responses
from entrypoints.api.schemas import FileOut
from entrypoints.api.security import Caller


class MemberArtifactsOut(Struct):
    attempt: int
    attempt_id: str
    member: int
    member_id: str
    digest: str
    size: int
    recorded_at: datetime
    node: str | None  # where the files live: a node's disk; null: the control plane's storage
    files: list[FileOut]


class ArtifactsOut(Struct):
    members: list[MemberArtifactsOut]
    backend: str  # the job's backend
    # whether that backend records members' outputs (a manifest when a member exits 0);
    # false: its members get no output directory (Kubernetes: docs/backends.md)
    records_outputs: bool


class DifferenceOut(Struct):
    path: str
    problem: str  # "changed", "missing" or "added"
    detail: str


class MemberVerifiedOut(Struct):
    attempt: int
    member: int
    member_id: str
    digest: str
    ok: bool
    files: int
    differences: list[DifferenceOut]
    node: str | None
    unchecked: str  # why the files could not be hashed again now ("" when they were)


class VerifiedOut(Struct):
    ok: bool
    members: list[MemberVerifiedOut]


def _ctx(state: State) -> Context:
    ctx: Context = state.ctx
    return ctx


def _member(r: ArtifactRecord) -> MemberArtifactsOut:
    files = [FileOut(f.path, f.size, f.sha256) for f in r.manifest.files]
    return MemberArtifactsOut(r.attempt, r.attempt_id, r.member_index, r.member_id,
                              r.manifest.digest, r.manifest.size, r.recorded_at, r.node,
                              files)  # fmt: skip


@get(
    "/v1/jobs/{job_id:str}/artifacts",
    responses=responses(400, 401, 404),
    summary="The output manifests recorded when the job's members completed",
)
async def job_artifacts(job_id: FromPath[str], state: State, principal: Caller) -> ArtifactsOut:
    listed = await artifacts.list_artifacts(_ctx(state), principal, job_id)
    return ArtifactsOut([_member(r) for r in listed.records], listed.backend, listed.recorded)


@post(
    "/v1/jobs/{job_id:str}/artifacts/verify",
    status_code=200,
    responses=responses(400, 401, 404),
    summary="Hash the job's output files again (on their node, where they live there) and"
    " compare them with their manifests",
)
async def verify_job_artifacts(
    job_id: FromPath[str],
    state: State,
    principal: Caller,
    wait_seconds: Annotated[
        float,
        Parameter(ge=0.5, le=300, description="how long nodes holding files may take to answer"),
    ] = SCAN_WAIT,
) -> VerifiedOut:
    checked = await artifacts.verify_artifacts(_ctx(state), principal, job_id, wait_seconds)
    members = [
        MemberVerifiedOut(
            v.record.attempt,
            v.record.member_index,
            v.record.member_id,
            v.record.manifest.digest,
            v.ok,
            len(v.record.manifest.files),
            [DifferenceOut(d.path, d.problem, d.detail) for d in v.differences],
            v.record.node,
            v.unchecked,
        )
        for v in checked
    ]
    return VerifiedOut(all(m.ok for m in members), members)


def _attachment(path: str) -> str:
    """Content-Disposition for the file's last path part: an ASCII fallback and its UTF-8
    name (RFC 6266/5987), so no character of it can break the header."""
    name = path.rsplit("/", 1)[-1]
    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


@get(
    "/v1/jobs/{job_id:str}/artifacts/{attempt:int}/{member:int}/file",
    media_type="application/octet-stream",
    responses=responses(400, 401, 404, 409, 503),
    summary="Download one file a member's manifest lists, checked against its SHA-256 as it"
    " streams",
)
async def download_artifact(
    job_id: FromPath[str],
    attempt: Annotated[int, Parameter(ge=1, le=1_000_000, description="the attempt's number")],
    member: Annotated[int, Parameter(ge=0, le=1024, description="the member's index")],
    path: Annotated[
        str,
        Parameter(
            min_length=1,
            max_length=4096,
            description="the file's path as the manifest lists it (relative to the member's"
            " output directory)",
        ),
    ],
    state: State,
    principal: Caller,
    wait_seconds: Annotated[
        float,
        Parameter(
            ge=0.5, le=600, description="how long a node keeping the file may take to send it"
        ),
    ] = FETCH_WAIT,
) -> Stream:
    try:
        check_artifact_path(path)
    except InvalidInput as exc:  # a path no manifest can list: malformed input, 400
        raise MalformedRequest(exc.message, fix=exc.fix, field=exc.field) from None
    got = await download(_ctx(state), principal, job_id, attempt, member, path, wait_seconds)
    return Stream(
        got.content,
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(got.file.size),
            "Content-Disposition": _attachment(got.file.path),
            "X-Content-Digest": f"sha256:{got.file.sha256}",
            "Cache-Control": "no-store",
        },
    )


ARTIFACT_ROUTES = [job_artifacts, verify_job_artifacts, download_artifact]
