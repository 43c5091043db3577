"""Checkpoints kept in place, for backends whose members write them where the next attempt
reads them and this control plane reads too (Slurm's shared directory; docs/checkpoints.md).

Nothing is copied. Before an attempt's members launch, ``for_launch`` (1) harvests the earlier
attempts' directories: each complete checkpoint not recorded yet is hashed where it is and
recorded with its manifest and its directory (``Checkpoint.kept_in``: its manifest names no
blobs, so blob collection neither keeps nor misses anything for it), keeping the last ``KEEP``
per job; then everything else of those directories is removed (the forgotten checkpoints, the
ones cut short, whatever else the workload left there); (2) makes the newest recorded one
read-only and verifies it where it is, every file's size and sha256 against its manifest and
nothing added; one that does not verify is skipped, saying why, for the one before it.

Every step is idempotent (a checkpoint recorded is not hashed again; a removal repeated removes
nothing), so a control plane killed at any point does it again on its next tick. Never inside a
transaction: files are read and hashed around them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from application import checkpoints
from application.checkpoints import LaunchCheckpoints
from application.context import Context
from domain.artifact_ports import CheckpointsInPlace, CheckpointStorage
from domain.checkpoints import Checkpoint, kept, newest_first
from domain.checkpoints import skipped as skipped_words
from domain.jobs import Member
from domain.lifecycle import JOB_FINAL

log = logging.getLogger("tuneplane.checkpoints")


async def harvest(
    ctx: Context, storage: CheckpointsInPlace, job_id: str, attempts: Iterable[int]
) -> int:
    """Record the attempts' complete checkpoints not recorded yet, keep the last ``KEEP`` of the
    job, and remove the rest from those attempts' directories; returns how many it recorded.
    Only for attempts that ended: what their directories hold but the kept checkpoints goes."""
    attempts = sorted(attempts)
    async with ctx.units.artifacts() as uow:
        known = {(c.attempt, c.name) for c in await uow.checkpoints.for_job(job_id)}
    recorded = 0
    for attempt in attempts:
        for found in await storage.complete(job_id, attempt):
            if (attempt, found.name) in known:
                continue
            manifest = await storage.manifest(found)
            if isinstance(manifest, str):
                log.warning("job %s: checkpoint %s of attempt %d not recorded: %s",
                            job_id, found.name, attempt, manifest)  # fmt: skip
                continue
            where = storage.path(job_id, attempt, found.name)
            checkpoint = Checkpoint(
                job_id, attempt, found.name, found.step, manifest, ctx.clock.now(), where
            )
            async with ctx.units.artifacts() as uow:
                recorded += await uow.checkpoints.record(checkpoint)
                _, dropped = kept(await uow.checkpoints.for_job(job_id))
                for old in dropped:  # its directory goes below, with the rest
                    await uow.checkpoints.drop(old.job_id, old.attempt, old.name)
                await uow.commit()
            log.info("checkpoint %s of job %s (attempt %d) recorded in place at %s",
                     found.name, job_id, attempt, where)  # fmt: skip
    async with ctx.units.artifacts() as uow:
        keeping = await uow.checkpoints.for_job(job_id)
    for attempt in attempts:
        await storage.prune(job_id, attempt, {c.name for c in keeping if c.attempt == attempt})
    return recorded


async def for_launch(
    ctx: Context, storage: CheckpointsInPlace, job_id: str, attempt: int
) -> LaunchCheckpoints:
    """The attempt's checkpoint directory (``work``) and the checkpoint it resumes from:
    ``resume`` its name, ``resume_root`` the directory that holds it (the attempt's that wrote
    it); with none, ``resume`` is None and ``resume_root`` the attempt's own directory."""
    work = await storage.prepare(job_id, attempt)
    earlier = [a for a in await storage.attempts(job_id) if a < attempt]
    if earlier:
        await harvest(ctx, storage, job_id, earlier)
    if attempt == 1:
        return LaunchCheckpoints(work, work, None)
    async with ctx.units.artifacts() as uow:
        found = await uow.checkpoints.for_job(job_id)
    skipped: list[str] = []
    for checkpoint in newest_first([c for c in found if c.kept_in and c.attempt < attempt]):
        await storage.seal(job_id, checkpoint.attempt, checkpoint.name)
        why = await storage.verify(checkpoint)
        if why is None:
            where = storage.path(job_id, checkpoint.attempt, checkpoint.name)
            root = where.removesuffix(f"/{checkpoint.name}")
            return LaunchCheckpoints(
                work, root, checkpoint.name, tuple(skipped), checkpoint.attempt, checkpoint.step
            )
        said = skipped_words(checkpoint, why)
        log.warning("job %s: %s", job_id, said)
        skipped.append(said)
    return LaunchCheckpoints(work, work, None, tuple(skipped))


async def launching(
    ctx: Context, backend: str, job_id: str, attempt: int, members: Iterable[Member]
) -> LaunchCheckpoints | None:
    """``for_launch`` when ``backend`` keeps checkpoints in place and a member of the attempt
    is still to launch; None else. Unavailable when its directory cannot be read: the launch
    waits for the next tick."""
    storage = ctx.backend_checkpoints.get(backend)
    if storage is None or all(m.handle is not None for m in members):
        return None
    return await for_launch(ctx, storage, job_id, attempt)


async def sweep(ctx: Context, storage: CheckpointsInPlace) -> int:
    """Harvest the directories of jobs that ended (a job's last attempt has no next one to
    harvest it): their kept checkpoints stay, the rest goes; a job the database no longer has
    loses its directories. Returns how many checkpoints it recorded."""
    recorded = 0
    for job_id in await storage.jobs():
        async with ctx.units.jobs() as uow:
            job = await uow.jobs.get(job_id)
        if job is not None and job.state not in JOB_FINAL:
            continue  # a running job's next attempt harvests, or this sweep once it ended
        attempts = await storage.attempts(job_id)
        if job is None:
            for attempt in attempts:
                await storage.prune(job_id, attempt, set())
        else:
            recorded += await harvest(ctx, storage, job_id, attempts)
    return recorded


async def keep_ended(ctx: Context) -> None:
    """``sweep`` of every backend's checkpoints kept in place, beside the supervisor's ticks:
    an error is logged, and the next sweep tries again."""
    for backend, storage in ctx.backend_checkpoints.items():
        try:
            swept = await sweep(ctx, storage)
        except Exception:
            log.exception("checkpoints of ended jobs on %s not swept yet", backend)
            continue
        if swept:
            log.info("%d checkpoints of ended jobs on %s recorded in place", swept, backend)


async def keep_all(ctx: Context, local: CheckpointStorage | None) -> None:
    """The supervisor's sweep of checkpoints: those of this host's directories (``local``, kept
    in the blob store: ``checkpoints.keep``), then those kept in place."""
    if local is not None:
        await checkpoints.keep(ctx, local)
    await keep_ended(ctx)
