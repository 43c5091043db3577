"""Checkpoints of node-backend members, on the gateway's side (docs/checkpoints.md).

A node's daemon offers each complete checkpoint of a member it runs (``offer``): the gateway
answers with the files the blob store lacks, the daemon sends them (``put_file``, each checked
against its digest as it is stored), and a second offer records the checkpoint with its
manifest, keeping the last ``KEEP`` of the job. Every call names a member the calling node
holds, placed on it and not fenced: a node declared lost can keep nothing more, and a node
cannot write into another job's checkpoints or read them.

A new attempt's Prepare names the checkpoint its members resume from (``with_resume``: the
newest recorded by an earlier attempt). Its node fetches every file (``send_file``); a file that
does not read back with its digest makes the gateway forget that checkpoint (it is damaged for
good: the store is content-addressed) and refuse the call, so that the node's no aborts the
launch and the next Prepare names the checkpoint before it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

from application.checkpoints import note_resume
from application.context import Context
from domain.checkpoints import Checkpoint, Resume, kept, resume_for
from domain.errors import Forbidden, NotFound
from domain.jobs import Attempt
from domain.node_messages import CheckpointOffer, PrepareOrder
from domain.node_ports import NodeWork
from domain.node_protocol import MemberRef, refusal

log = logging.getLogger("tuneplane.checkpoints")


async def with_resume(ctx: Context, order: PrepareOrder) -> PrepareOrder:
    """The order with the checkpoint its member resumes from (none on a first attempt)."""
    if order.attempt <= 1:
        return order
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(order.job_id)
    resume = resume_for(found, order.attempt)
    return order if resume is None else replace(order, resume=resume)


async def record_resumed(ctx: Context, attempt: Attempt) -> None:
    """Once its launch is committed, record on the attempt the checkpoint its members resumed
    from: the one every Prepare named (a checkpoint forgotten while they fetched it made a
    busy no, so a committed launch fetched the same one everywhere)."""
    if attempt.number <= 1:
        return
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(attempt.job_id)
    resume = resume_for(found, attempt.number)
    said = Resume(resume.name, resume.attempt, resume.step) if resume else Resume()
    await note_resume(ctx, attempt, said)


async def held_member(ctx: Context, node: str, ref: MemberRef, job_id: str) -> NodeWork:
    """The member ``ref`` if node ``node`` holds it for job ``job_id`` (placed there, its epoch
    current, not fenced); Forbidden otherwise, saying why."""
    async with ctx.units.nodes() as uow:
        works = await uow.launches.on_nodes([node])
    work = next((w for w in works if w.placed.ref.member_id == ref.member_id), None)
    why = refusal(work.placed if work else None, ref, node)
    if why is None and work is not None and work.placed.job_id != job_id:
        why = f"member {ref.member_id} belongs to job {work.placed.job_id}, not {job_id}"
    if why is not None or work is None:
        raise Forbidden(
            f"node {node} cannot keep or read checkpoints through this member: {why}",
            fix="nothing to do on the node: its member was moved, ended or fenced",
        )
    return work


async def offer(ctx: Context, node: str, offered: CheckpointOffer) -> tuple[bool, list[str]]:
    """(recorded, the digests of the files still to send). Recorded once every file is in the
    blob store; an offer of a checkpoint recorded before is answered recorded (the first
    stays)."""
    work = await held_member(ctx, node, offered.ref, offered.job_id)
    attempt = work.attempt
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(offered.job_id)
    if any(c.attempt == attempt and c.name == offered.name for c in found):
        return True, []
    missing: list[str] = []
    for f in offered.manifest.files:
        if f.sha256 not in missing and await ctx.blob_store().size(f"sha256:{f.sha256}") is None:
            missing.append(f.sha256)
    if missing:
        return False, missing
    checkpoint = Checkpoint(
        offered.job_id, attempt, offered.name, offered.step, offered.manifest, ctx.clock.now()
    )
    async with ctx.units.artifacts() as uow:
        await uow.checkpoints.record(checkpoint)
        _, dropped = kept(await uow.checkpoints.for_job(offered.job_id))
        for old in dropped:  # its blobs are collected unless something else names them
            await uow.checkpoints.drop(old.job_id, old.attempt, old.name)
        await uow.commit()
    log.info(
        "checkpoint %s of job %s (attempt %d) kept from node %s",
        offered.name, offered.job_id, attempt, node,
    )  # fmt: skip
    return True, []


async def put_file(
    ctx: Context, node: str, ref: MemberRef, job_id: str, sha256: str,
    chunks: AsyncIterator[bytes],
) -> None:  # fmt: skip
    """Store one file of a checkpoint the node is offering; InvalidInput (nothing stored) when
    its content does not match ``sha256``, TooLarge past the limit of a checkpoint file."""
    await held_member(ctx, node, ref, job_id)
    await ctx.blob_store().put(
        chunks, ctx.limits.max_checkpoint_file_bytes, expected=f"sha256:{sha256}"
    )


async def send_file(
    ctx: Context, node: str, ref: MemberRef, job_id: str, sha256: str
) -> AsyncIterator[bytes]:
    """The content of a file of a checkpoint member ``ref`` may resume from (one an earlier
    attempt of its job recorded), checked as it is sent: a file that does not read back whole
    with its digest makes this checkpoint forgotten, and the call fails (NotFound) after its
    last piece instead of ending well."""
    work = await held_member(ctx, node, ref, job_id)
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(job_id)
    naming = [c for c in found if c.attempt < work.attempt and _names(c, sha256)]
    if not naming:
        raise NotFound(
            f"no checkpoint of job {job_id} that attempt {work.attempt} may resume from "
            f"has a file with digest {sha256}",
            fix="nothing to do on the node: the checkpoint was forgotten; the launch is retried",
        )
    digest, hashed, why = f"sha256:{sha256}", hashlib.sha256(), ""
    try:
        async for chunk in ctx.blob_store().chunks(digest):
            hashed.update(chunk)
            yield chunk
    except NotFound:
        why = "is gone from the blob store"
    if not why and hashed.hexdigest() != sha256:
        why = "does not match its digest"
    if why:
        await forget_damaged(ctx, job_id, naming, f"its file {digest} {why}")
        raise NotFound(
            f"a file of checkpoint {naming[0].name} of job {job_id} {why}; "
            "the checkpoint is forgotten",
            fix="nothing to do on the node: the launch is retried from the checkpoint before",
        )


def _names(c: Checkpoint, sha256: str) -> bool:
    return any(f.sha256 == sha256 for f in c.manifest.files)


async def forget_damaged(ctx: Context, job_id: str, damaged: list[Checkpoint], why: str) -> None:
    async with ctx.units.artifacts() as uow:
        for c in damaged:
            await uow.checkpoints.drop(c.job_id, c.attempt, c.name)
        await uow.commit()
    for c in damaged:
        log.warning(
            "job %s: checkpoint %s of attempt %d skipped and forgotten: %s",
            job_id, c.name, c.attempt, why,
        )  # fmt: skip
