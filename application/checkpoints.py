"""Checkpoints across attempts, for backends whose members mount this host's directories (the
local backend; docs/checkpoints.md).

Before an attempt's members launch, ``for_launch`` (1) harvests every earlier attempt's complete
checkpoints into the blob store and records them with their manifests (idempotent: a checkpoint
already recorded is skipped), keeping the last ``KEEP`` per job, then removes those attempts'
directories; (2) materializes the newest recorded checkpoint whose every file reads back from
the blob store with its digest into the attempt's resume directory, skipping (and saying why)
any that does not. Never inside a transaction: files are read, hashed and written around them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass

from application.context import Context
from domain.artifact_ports import CheckpointStorage
from domain.artifacts import ArtifactFile, Manifest
from domain.checkpoints import Checkpoint, Resume, kept, newest_first, outranked
from domain.checkpoints import skipped as skipped_words
from domain.errors import InvalidInput, TunePlaneError
from domain.jobs import Attempt
from domain.lifecycle import JOB_FINAL

log = logging.getLogger("tuneplane.checkpoints")
PARALLEL = 4  # files of a checkpoint hashed and copied at once (into and out of the store)


@dataclass(frozen=True, slots=True)
class LaunchCheckpoints:
    work: str  # the attempt's checkpoint directory on this host
    resume_root: str  # its resume directory on this host
    resume: str | None  # the name of the checkpoint it resumes from (under resume_root)
    skipped: tuple[str, ...] = ()  # newer checkpoints that did not verify, and why
    resumed_attempt: int | None = None  # the attempt that wrote the one it resumes from
    resumed_step: int | None = None  # and its step

    @property
    def said(self) -> Resume:
        """What the attempt starts from, as recorded on it (``record_resume``)."""
        return Resume(self.resume, self.resumed_attempt, self.resumed_step, self.skipped)


async def harvest(ctx: Context, storage: CheckpointStorage, job_id: str, attempt: int) -> int:
    """Record the attempt's complete checkpoints not recorded yet; returns how many. Only new
    ones are hashed: one recorded already, or one the ``KEEP`` rule would collect at once (as
    many newer ones are recorded: the older saves of a long run) is skipped unread. One harvest
    of an attempt at a time in this process (a launch's and the keeping's): the second reads
    what the first recorded instead of hashing the same files again."""
    lock = _harvesting.setdefault((job_id, attempt), asyncio.Lock())
    async with lock:
        return await _harvest(ctx, storage, job_id, attempt)


_harvesting: weakref.WeakValueDictionary[tuple[str, int], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)  # an attempt's lock lives while a harvest holds or waits for it


async def _harvest(ctx: Context, storage: CheckpointStorage, job_id: str, attempt: int) -> int:
    async with ctx.units.artifacts() as uow:
        have = await uow.checkpoints.for_job(job_id)
    known = {(c.attempt, c.name) for c in have}
    recorded = 0
    gate = asyncio.Semaphore(PARALLEL)

    async def upload(rel: str, path: str, root: str) -> ArtifactFile:
        async with gate:  # read from under the checkpoint's directory only
            digest, size = await ctx.blob_store().put_file(
                path, ctx.limits.max_checkpoint_file_bytes, beneath=root or None
            )
        return ArtifactFile(rel, size, digest.removeprefix("sha256:"))

    found_now = await storage.complete(job_id, attempt)
    for found in sorted(found_now, key=lambda f: (f.step is None, f.step or 0), reverse=True):
        if (attempt, found.name) in known or outranked(have, attempt, found.step):
            continue
        try:
            files = await asyncio.gather(
                *(upload(rel, path, found.root) for rel, path in found.files)
            )
        except InvalidInput as exc:  # a link or a swapped directory: never recorded
            log.warning("checkpoint %s of job %s left out: %s", found.name, job_id, exc.message)
            continue
        checkpoint = Checkpoint(
            job_id, attempt, found.name, found.step, Manifest.of(files), ctx.clock.now()
        )
        async with ctx.units.artifacts() as uow:
            recorded += await uow.checkpoints.record(checkpoint)
            have, dropped = kept(await uow.checkpoints.for_job(job_id))
            for old in dropped:  # its blobs are collected unless something else names them
                await uow.checkpoints.drop(old.job_id, old.attempt, old.name)
            await uow.commit()
        log.info("checkpoint %s of job %s (attempt %d) recorded", found.name, job_id, attempt)
    return recorded


async def _materialize(
    ctx: Context, storage: CheckpointStorage, attempt: int, checkpoint: Checkpoint
) -> str | None:
    """Place the checkpoint's files in the attempt's resume directory, each read back from the
    blob store with its digest checked; None when done (or already done), else what is wrong."""
    job_id, name = checkpoint.job_id, checkpoint.name
    if await storage.resumed(job_id, attempt, name) == checkpoint.digest:
        return None  # placed by a launch of this attempt that was cut short after
    await storage.clear(job_id, attempt, name)
    gate = asyncio.Semaphore(PARALLEL)

    async def place(f: ArtifactFile) -> str | None:
        async with gate:
            try:
                target = await storage.resume_path(job_id, attempt, name, f.path)
                await ctx.blob_store().copy_to(f"sha256:{f.sha256}", target)
            except TunePlaneError as exc:  # gone, refused by the digest check, a bad path
                return f"{f.path}: {exc.message}"
        return None

    problems = [p for p in await asyncio.gather(*map(place, checkpoint.manifest.files)) if p]
    if problems:
        await storage.clear(job_id, attempt, name)
        return problems[0]
    await storage.seal(job_id, attempt, name, checkpoint.digest)
    return None


async def for_launch(
    ctx: Context, storage: CheckpointStorage, job_id: str, attempt: int
) -> LaunchCheckpoints:
    """The attempt's checkpoint directories, with the checkpoint it resumes from in place."""
    work, resume_root = await storage.prepare(job_id, attempt)
    for earlier in await storage.attempts(job_id):
        if earlier < attempt:
            await harvest(ctx, storage, job_id, earlier)
            await storage.discard(job_id, earlier)
    if attempt == 1:
        return LaunchCheckpoints(work, resume_root, None)
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(job_id)
    skipped: list[str] = []
    for checkpoint in newest_first(found):
        why = await _materialize(ctx, storage, attempt, checkpoint)
        if why is None:
            return LaunchCheckpoints(
                work, resume_root, checkpoint.name, tuple(skipped), checkpoint.attempt,
                checkpoint.step,
            )  # fmt: skip
        said = skipped_words(checkpoint, why)
        log.warning("job %s: %s", job_id, said)
        skipped.append(said)
    return LaunchCheckpoints(work, resume_root, None, tuple(skipped))


async def record_resume(ctx: Context, attempt: Attempt, saved: LaunchCheckpoints) -> None:
    """Record on the attempt what it starts from (``tp job why``, the API, the console), right
    after the launch decision and before its members launch. Any backend that decided a
    ``LaunchCheckpoints`` calls this."""
    await note_resume(ctx, attempt, saved.said)


async def note_resume(ctx: Context, attempt: Attempt, said: Resume) -> None:
    """``record_resume`` of what was decided: once per attempt in effect (a repeated launch
    decides the same and writes nothing); a first attempt with nothing to say records
    nothing."""
    if attempt.resume == said or (attempt.number == 1 and said == Resume()):
        return
    async with ctx.units.jobs() as uow:
        current = await uow.attempts.get(attempt.id)
        if current is None or current.resume == said:
            return
        await uow.attempts.note_resume(attempt.id, said)
        await uow.commit()


async def sweep(ctx: Context, storage: CheckpointStorage) -> int:
    """Keep every job's complete checkpoints in the blob store: a job not ended has its attempts'
    directories harvested and left in place (a host lost meanwhile takes nothing kept with it;
    its next launch or a later sweep removes them); a job that ended has them harvested and
    removed (its last attempt has no next one to harvest it; a supervisor that died before
    this is caught up by the next sweep). Returns how many attempt directories were removed."""
    removed = 0
    for job_id in await storage.jobs():
        async with ctx.units.jobs() as uow:
            job = await uow.jobs.get(job_id)
        if job is not None and job.state not in JOB_FINAL:
            await _harvest_running(ctx, storage, job_id)
            continue
        for attempt in await storage.attempts(job_id):
            if job is not None:
                await harvest(ctx, storage, job_id, attempt)
            await storage.discard(job_id, attempt)  # a job gone: nothing to keep
            removed += 1
    return removed


async def _harvest_running(ctx: Context, storage: CheckpointStorage, job_id: str) -> None:
    """Harvest a job's attempt directories while it may still write them; never discard one.
    A checkpoint the workload removes or changes while it is read (a trainer rotating its
    saves) fails this harvest, said and tried again by the next sweep; nothing of it is
    recorded (its blobs already stored are collected unless something names them)."""
    for attempt in await storage.attempts(job_id):
        try:
            await harvest(ctx, storage, job_id, attempt)
        except (TunePlaneError, OSError) as exc:
            log.warning("checkpoints of job %s (attempt %d) not kept yet: %s", job_id, attempt, exc)


async def keep(ctx: Context, storage: CheckpointStorage) -> None:
    """``sweep``, run beside the supervisor's ticks: an error is logged, and the next sweep
    tries again."""
    try:
        removed = await sweep(ctx, storage)
    except Exception:
        log.exception("checkpoints not kept yet")
        return
    if removed:
        log.info("checkpoints of ended jobs kept; %d directories removed", removed)
