"""Downloading an output file a node keeps (docs/capsule.md#on-the-node-backend).

The control plane cannot read a node's disk. To hand a caller a file of a node-backend member,
the API writes a *fetch request* to the ``output_scans`` ledger (a scan request naming the file)
and wakes the gateways; the gateway holding the node's stream sends ``FetchOutput``; the daemon
sends the file through ``PutOutputFile`` beside the stream; the gateway stores it in the blob
store under the digest the manifest recorded (content that does not match is refused, nothing
stored) and records the answer; the API, polling, then streams the blob, hashing it again.

The blob store is content-addressed, so a file fetched once is served from it afterwards
without asking the node again; nothing refers to it, so blob collection removes it after the
grace period (docs/operations.md#blob-collection). A node that is not connected, or does not
answer in time, makes the download fail saying so: the file is not declared missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from application.context import Context
from application.node_outputs import SCAN_LIFETIME, answers, unreachable
from domain.artifacts import ArtifactFile, ArtifactRecord, ScanRequest, ScanResult
from domain.errors import Conflict, Forbidden, InvalidInput, TooLarge, Unavailable

FETCH_WAIT = 60.0  # how long a download waits for the node to send the file, seconds


def blob_of(file: ArtifactFile) -> str:
    return f"sha256:{file.sha256}"


async def fetch_from_node(
    ctx: Context, record: ArtifactRecord, file: ArtifactFile, wait: float = FETCH_WAIT
) -> str:
    """The blob digest under which ``file`` of ``record`` (kept on its node) is now in the blob
    store, asking its node for it unless it is there already. Conflict when the node cannot
    send it (gone, changed, unreadable), Unavailable when it is not connected or too slow."""
    assert record.node is not None
    node, digest = record.node, blob_of(file)
    if await ctx.blob_store().size(digest) == file.size:
        return digest
    where = f"node {node} ({record.job_id}/{record.attempt_id}/{record.member_index}/{file.path})"
    if file.size > ctx.limits.max_checkpoint_file_bytes:
        raise Conflict(
            f"{file.path} is {file.size} bytes, over the {ctx.limits.max_checkpoint_file_bytes}"
            f" this control plane carries from a node; it is kept on {where}",
            fix=f"copy it from node {node} directly (e.g. with scp)",
        )
    now = ctx.clock.now()
    request = ScanRequest(
        ctx.ids.new("fetch"), node, record.job_id, record.attempt_id, record.member_id,
        record.member_index, now, fetch=file,
    )  # fmt: skip
    async with ctx.units.node_fleet() as uow:
        await uow.output_scans.prune(now - SCAN_LIFETIME)
        why = unreachable(await uow.fleet.node(node), node)
        if why is None:
            await uow.output_scans.request(request)
            await uow.commit()
    if why is not None:
        raise Unavailable(
            f"{file.path} is kept on {where}, and {why}: it cannot be fetched now",
            fix="download it again once the node is connected (`tp node ls`)",
        )
    answer = (await answers(ctx, [request.id], wait)).get(request.id)
    if answer is None:
        raise Unavailable(
            f"node {node} did not send {file.path} ({file.size} bytes) within {wait:g} s",
            fix="download it again in a while (a file the node finishes sending is kept), or"
            " wait longer (`tp artifacts get --wait`)",
        )
    if answer.error:
        raise Conflict(
            f"node {node} cannot send {file.path}: {answer.error}",
            fix=f"`tp artifacts verify {record.job_id}` compares every file with the manifest",
        )
    return digest


async def _open_fetch(ctx: Context, node: str, request_id: str) -> ScanRequest:
    async with ctx.units.nodes() as uow:
        pending = await uow.output_scans.pending([node], ctx.clock.now() - SCAN_LIFETIME)
    found = next((r for r in pending if r.id == request_id and r.fetch is not None), None)
    if found is None:
        raise Forbidden(
            f"node {node} has no open request {request_id[:80]!r} for an output file",
            fix="nothing to do on the node: the request was answered or has lapsed",
        )
    return found


async def _answer(ctx: Context, node: str, request: ScanRequest, error: str) -> None:
    result = ScanResult(request.id, None, error[:4000], ctx.clock.now())
    async with ctx.units.nodes() as uow:
        await uow.output_scans.answer(node, result)
        await uow.commit()


async def receive(
    ctx: Context, node: str, request_id: str, error: str, content: AsyncIterator[bytes]
) -> None:
    """A node's answer to a ``FetchOutput`` (gateway side): the file's content, stored only if
    it is exactly what the manifest recorded, or ``error``, why the node cannot send it. Only
    the node the request was meant for may answer it, and only once."""
    request = await _open_fetch(ctx, node, request_id)
    file = request.fetch
    assert file is not None
    if error:
        await _answer(ctx, node, request, error)
        return
    try:
        await ctx.blob_store().put(content, file.size, expected=blob_of(file))
    except (InvalidInput, TooLarge) as exc:
        why = f"the file there is not the one recorded when its member completed ({exc.message})"
        await _answer(ctx, node, request, why)
        raise InvalidInput(why, fix="nothing to do on the node: the download is refused") from None
    except OSError as exc:  # the control plane's side (a full disk): said, not waited out
        why = f"the control plane cannot store it now ({exc.strerror or exc})"
        await _answer(ctx, node, request, why)
        raise Unavailable(why, fix="nothing to do on the node; an operator frees space") from None
    await _answer(ctx, node, request, "")
