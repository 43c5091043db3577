"""Preview and commit: the idempotent submission protocol (docs/architecture.md, "The
submission path")."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator

from application import archives, plugins
from application.context import Context
from application.instruments import COMMITS, PREVIEWS
from application.policy import choose_queue
from application.runtimes import runtime_for
from domain import capsule
from domain.auth import Principal
from domain.canonical import canonical_json
from domain.capsule import CapsuleRef, StorageCapabilities
from domain.catalog import Method, resolve_params
from domain.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RetryKeyReused,
    Unavailable,
)
from domain.fleet import Queue
from domain.jobs import Job, Receipt, Submission
from domain.lifecycle import JobState
from domain.requests import RoleSpec, envelope_gpus, fits_pool, resolve_roles
from domain.runtimes import require_framework
from domain.submission import (
    JobSpec,
    Preview,
    SourceRef,
    SubmissionIntent,
    make_preview,
    resolve,
)
from domain.unit_of_work import JobsUnit

RETRY_KEY_MIN, RETRY_KEY_MAX = 16, 128
RETRY_KEY_PATTERN = "^[ -~]+$"  # printable ASCII (the OpenAPI document's words)


def _require_submitter(principal: Principal) -> None:
    if not principal.can_submit:
        raise Forbidden(
            f"user {principal.name} has role {principal.role}, which may not submit jobs",
            fix="ask an admin for a member token",
        )


async def _requests(
    ctx: Context, principal: Principal, intent: SubmissionIntent
) -> tuple[tuple[RoleSpec, ...], str, Queue]:
    """Resolve the profiles against the fleet and the queue policy; refuse a request that can
    never start (too big for its pool or for its queue's quota), saying why."""
    queue = await choose_queue(ctx, principal, intent.queue)
    async with ctx.units.fleet() as uow:
        pools = await uow.fleet.pools()
        profiles = await uow.fleet.profiles()
        counts = await uow.fleet.node_counts()
    roles = resolve_roles(intent.profiles, pools, profiles)
    by_name = {p.name: p for p in pools}
    for i, role in enumerate(roles):
        why = fits_pool(role, by_name[role.pool], counts.get(role.pool, 0))
        if why:
            raise InvalidInput(
                f"this request can never start: {why}",
                fix="ask for less (see `tp fleet ls`), or ask an operator to add nodes",
                field=f"intent.profiles[{i}]",
            )
    gpus = envelope_gpus(roles)
    if queue.job_quota == 0:
        raise InvalidInput(
            f"queue {queue.name} is closed (its job quota is 0)",
            fix="submit to another queue (see `tp queue ls`)",
            field="intent.queue",
        )
    if queue.gpu_quota is not None and gpus > queue.gpu_quota:
        raise InvalidInput(
            f"this request can never start: it needs {gpus} GPUs and queue {queue.name} "
            f"allows at most {queue.gpu_quota}",
            fix="ask for fewer GPUs or submit to a queue with a larger quota (`tp queue ls`)",
            field="intent.queue",
        )
    return roles, by_name[roles[0].pool].backend, queue


async def create_preview(ctx: Context, principal: Principal, intent: SubmissionIntent) -> Preview:
    """Resolve ``intent`` and store an immutable preview. Creates no job."""
    _require_submitter(principal)
    method = ctx.catalog.method(intent.method)
    resolve_params(method, intent.params)  # a wrong parameter is named first, whatever else is
    runtime = await runtime_for(ctx, method, intent.runtime)
    require_framework(method, runtime)  # before anything is pinned or uploaded
    roles, backend_name, queue = await _requests(ctx, principal, intent)
    backend = ctx.backend(backend_name)
    source = await _source(ctx, intent.source)
    pin = await backend.pin(runtime)  # a network call: outside any transaction
    spec = resolve(intent, ctx.catalog, pin, roles, backend.name, queue.name, queue.max_attempts)
    _check_needs(method, backend.name, backend.storage)
    uses, plugin_files = await plugins.for_preview(
        ctx, intent.plugins, backend.name, backend.storage.capsule
    )
    spec = dataclasses.replace(spec, plugins=uses)
    if backend.storage.capsule:
        spec = await _with_capsule(ctx, spec, method, plugin_files, source)
    preview = make_preview(
        preview_id=ctx.ids.new("pv"),
        owner=principal.name,
        intent=intent,
        spec=spec,
        now=ctx.clock.now(),
        ttl=ctx.limits.preview_ttl,
    )
    async with ctx.units.jobs() as uow:
        await uow.previews.add(preview)
        await uow.commit()
    ctx.instruments.inc(PREVIEWS)
    return preview


async def _source(ctx: Context, ref: SourceRef | None) -> bytes | None:
    """The source archive ``ref`` names, checked: uploaded, of that size, and an archive the
    runner can unpack (a digest of anything else stored, e.g. a capsule or a blob from before
    uploads were checked, is refused here)."""
    if ref is None:
        return None
    stored = await ctx.blob_store().size(ref.digest)
    if stored is None:
        raise InvalidInput(
            f"source archive {ref.digest} was never uploaded",
            fix="upload it first with POST /v1/archives (the CLI does this for you)",
            field="intent.source.digest",
        )
    if stored != ref.size:
        raise InvalidInput(
            f"source archive size {ref.size} does not match the stored {stored}",
            fix="send the size returned by POST /v1/archives",
            field="intent.source.size",
        )
    data = await ctx.blob_store().read(ref.digest)
    await archives.check_source(ctx, data, "intent.source.digest")
    return data


def _check_needs(method: Method, backend: str, offers: StorageCapabilities) -> None:
    """Refuse a recipe whose needs the backend does not meet, naming what is missing."""
    needs = set(method.needs) | ({"capsule"} if method.artifact else set())
    missing = sorted(n for n in needs if not offers.offers(n))
    if missing:
        raise InvalidInput(
            f"method {method.name} needs {', '.join(missing)}; backend {backend} does not offer"
            " it (docs/capsule.md, storage capabilities)",
            fix="choose a profile on a backend that offers it (`tp profiles`)",
            field="intent.profiles",
        )


async def _with_capsule(
    ctx: Context,
    spec: JobSpec,
    method: Method,
    plugin_files: dict[str, bytes],
    source: bytes | None,
) -> JobSpec:
    """Build the Job Capsule of ``spec`` (docs/capsule.md), store its tar as a blob and pin
    its digest in the spec, so that the commit fixes exactly what each member will run."""
    extra = {f"artifact/{name}": data for name, data in method.artifact}
    if method.artifact:
        extra["config.json"] = canonical_json(method.config(spec.params))
    extra |= plugin_files  # workload plugins' plugins/<name>/… (docs/plugins.md)
    digest, tar = capsule.build(
        canonical_json(spec.to_dict()), spec.command, spec.runtime, source, extra
    )

    async def once() -> AsyncIterator[bytes]:
        yield tar

    blob, size = await ctx.blob_store().put(once(), max_size=len(tar))
    return dataclasses.replace(spec, capsule=CapsuleRef(digest, blob, size))


async def get_preview(ctx: Context, principal: Principal, preview_id: str) -> Preview:
    async with ctx.units.jobs() as uow:
        preview = await uow.previews.get(preview_id)
    if preview is None or (preview.owner != principal.name and not principal.sees_all_jobs):
        raise NotFound(f"no preview {preview_id}", fix="check the id, or preview again")
    return preview


def _check_retry_key(retry_key: str) -> None:
    if not (RETRY_KEY_MIN <= len(retry_key) <= RETRY_KEY_MAX) or not re.fullmatch(
        "[ -~]+", retry_key
    ):
        raise InvalidInput(
            f"retry key must be {RETRY_KEY_MIN}-{RETRY_KEY_MAX} printable ASCII characters",
            fix="send the retry key from the submission file (a uuid4), unchanged",
            field="retry_key",
        )


async def _replay(
    uow: JobsUnit, existing: Submission, preview: Preview, digest: str, retry_key: str
) -> Receipt:
    """Answer a commit that lost the claim to an earlier row. A digest that is not the
    preview's is refused first, as a first commit is: the answer does not depend on whether
    the key or the preview was used before."""
    preview_id = preview.id
    preview.check_digest(digest)
    if existing.retry_key == retry_key:
        if existing.preview_id == preview_id:
            job = await uow.jobs.get(existing.job_id)
            if job is None:  # the ledger and the job are written in one transaction
                raise Unavailable(
                    f"job {existing.job_id} is recorded but not readable yet",
                    fix="retry the same commit",
                )
            return Receipt(existing.job_id, preview_id, retry_key, created=False, job=job)
        raise RetryKeyReused(
            f"retry key {retry_key} was already used for preview {existing.preview_id}",
            fix="a retry key confirms one preview only: use a fresh key for a new preview "
            "(`tp submit --preview` writes one)",
            field="retry_key",
        )
    raise Conflict(
        f"preview {preview_id} was already committed as job {existing.job_id} "
        "under another retry key",
        fix=f"see `tp job status {existing.job_id}`, or preview again to submit a new job",
        field="preview_id",
    )


async def commit(
    ctx: Context, principal: Principal, preview_id: str, digest: str, retry_key: str
) -> Receipt:
    """Turn a preview into a job, exactly once per (preview, digest, retry key).

    One transaction; the commit ledger's unique keys decide races between concurrent commits.
    """
    _require_submitter(principal)
    _check_retry_key(retry_key)
    now = ctx.clock.now()
    job_id = ctx.ids.new("job")
    async with ctx.units.job_artifacts() as uow:
        preview = await uow.previews.get(preview_id)
        if preview is None or preview.owner != principal.name:
            raise NotFound(
                f"no preview {preview_id}",
                fix="run `tp submit --preview` to create one",
                field="preview_id",
            )
        claim = Submission(retry_key, preview_id, digest, job_id, principal.name, now)
        existing = await uow.submissions.claim(claim)
        if existing is not None:
            replayed = await _replay(uow, existing, preview, digest, retry_key)
            ctx.instruments.inc(COMMITS, outcome="replayed")
            return replayed
        preview.check_commit(digest, now)  # raising here rolls the claim back
        await plugins.check_commit(uow, preview.spec.plugins)  # one disabled since: refused
        job = Job(
            id=job_id,
            preview_id=preview_id,
            owner=principal.name,
            spec=preview.spec,
            state=JobState.PENDING,
            created_at=now,
            updated_at=now,
        )
        await uow.jobs.add(job)
        await uow.commit()
    ctx.instruments.inc(COMMITS, outcome="created")
    return Receipt(job_id, preview_id, retry_key, created=True, job=job)
