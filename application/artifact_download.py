"""Downloading one file of a job's artifacts (``GET /v1/jobs/{id}/artifacts/{attempt}/{member}/
file?path=…``, ``tp artifacts get``): the caller must see the job, the path must be one the
member's manifest lists, and the file is streamed from where the job's backend kept it (a file a
node keeps is first sent by its node into the blob store), its size and SHA-256 checked against
the manifest as it goes (docs/capsule.md#downloading-a-file)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from application.context import Context
from application.jobs import get_job
from application.node_output_fetch import FETCH_WAIT, fetch_from_node
from domain.artifacts import ArtifactFile, ArtifactRecord, check_artifact_path
from domain.auth import Principal
from domain.errors import Conflict, NotFound


@dataclass(frozen=True, slots=True)
class Download:
    record: ArtifactRecord
    file: ArtifactFile
    content: AsyncIterator[bytes]  # the file's bytes; ends with Conflict before its last chunk
    # when what was read is not what the manifest recorded (so a client never gets it whole)


def _record(
    records: list[ArtifactRecord], job_id: str, attempt: int, member: int
) -> ArtifactRecord:
    for r in records:
        if (r.attempt, r.member_index) == (attempt, member):
            return r
    have = ", ".join(f"attempt {r.attempt} member {r.member_index}" for r in records) or "none"
    raise NotFound(
        f"job {job_id} has no recorded outputs of attempt {attempt} member {member}"
        f" (recorded: {have})",
        fix=f"`tp artifacts ls {job_id}` lists the recorded members and their files",
    )


async def download(
    ctx: Context, principal: Principal, job_id: str, attempt: int, member: int, path: str,
    wait: float = FETCH_WAIT,
) -> Download:  # fmt: skip
    """The file, checked as it streams; ``wait``: how long a node keeping it may take to send
    it (application/node_output_fetch.py)."""
    check_artifact_path(path)
    job = (await get_job(ctx, principal, job_id)).job  # NotFound unless the caller may see it
    async with ctx.units.artifacts() as uow:
        records = await uow.artifacts.for_job(job.id)
    record = _record(records, job.id, attempt, member)
    file = next((f for f in record.manifest.files if f.path == path), None)
    if file is None:
        raise NotFound(
            f"attempt {attempt} member {member} of job {job.id} recorded no file {path!r}",
            fix=f"`tp artifacts ls {job.id}` lists its files",
            field="query.path",
        )
    if record.node is not None:  # the node sends it into the blob store first
        digest = await fetch_from_node(ctx, record, file, wait)
        chunks = ctx.blob_store().chunks(digest)
        return Download(record, file, await _verified(job.id, file, _closable(chunks)))
    store = ctx.backend_outputs.get(job.spec.backend, ctx.outputs)
    if store is None:
        raise Conflict(
            f"the outputs of job {job.id} ({job.spec.backend} backend) are not kept where this"
            " control plane can read them",
            fix="read the file where the backend keeps it, or ask an operator",
        )
    size, chunks = await store.open(job.id, record.attempt_id, record.member_index, path)
    if size != file.size:
        await chunks.aclose()
        raise _changed(job.id, file, f"{size} bytes now, {file.size} recorded")
    return Download(record, file, await _verified(job.id, file, chunks))


async def _closable(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    async for chunk in chunks:
        yield chunk


def _changed(job_id: str, file: ArtifactFile, detail: str) -> Conflict:
    return Conflict(
        f"{file.path} is not the file recorded when its member completed ({detail})",
        fix=f"`tp artifacts verify {job_id}` shows every file that changed",
    )


async def _verified(
    job_id: str, file: ArtifactFile, chunks: AsyncGenerator[bytes, None]
) -> AsyncIterator[bytes]:
    """``chunks`` hashed as they pass, one chunk held back: at the end the last is given only
    when size and SHA-256 match the manifest, else Conflict. The first chunk and the one after
    it are read now, so that a file of one chunk is checked whole before any answer starts."""
    digest = hashlib.sha256()
    seen = 0
    it = aiter(chunks)

    async def take() -> bytes | None:
        nonlocal seen
        chunk = await anext(it, None)
        if chunk is not None:
            digest.update(chunk)
            seen += len(chunk)
        return chunk

    def check() -> None:
        if seen != file.size or digest.hexdigest() != file.sha256:
            raise _changed(job_id, file, f"sha256 {digest.hexdigest()[:12]}…, {seen} bytes read")

    try:
        held = await take()
        ahead = await take() if held is not None else None
        if ahead is None:
            check()
    except BaseException:
        await chunks.aclose()
        raise

    async def gen() -> AsyncIterator[bytes]:
        nonlocal held, ahead
        try:
            while ahead is not None:
                yield held or b""
                held, ahead = ahead, await take()
            check()
            if held:
                yield held
        finally:
            await chunks.aclose()

    return gen()
