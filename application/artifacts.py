"""A job's artifacts: the manifests recorded when its members completed, and checking the
files against them (``tp artifacts ls|verify``)."""

from __future__ import annotations

from dataclasses import dataclass

from application.context import Context
from application.jobs import get_job
from application.node_outputs import SCAN_WAIT, scan_on_nodes
from domain.artifacts import ArtifactRecord, Difference, Manifest, ScanResult, compare
from domain.auth import Principal


@dataclass(frozen=True, slots=True)
class Verified:
    record: ArtifactRecord
    differences: list[Difference]
    unchecked: str = ""  # why the files could not be hashed again now (their node is away)

    @property
    def ok(self) -> bool:
        return not self.differences and not self.unchecked


@dataclass(frozen=True, slots=True)
class Listed:
    records: list[ArtifactRecord]
    backend: str  # the job's backend
    recorded: bool  # whether that backend records members' outputs at all (docs/backends.md)


def records_outputs(ctx: Context, backend: str) -> bool:
    """Whether members of ``backend`` get an output directory whose files are recorded when
    they exit 0: a node backend's daemons report them; another backend when this control
    plane (or the backend's own storage) keeps them. Kubernetes members get none."""
    if backend in ctx.coordinated:
        return True
    known = ctx.backends.get(backend)
    return known is not None and ctx.outputs_of(known) is not None


async def list_artifacts(ctx: Context, principal: Principal, job_id: str) -> Listed:
    job = (await get_job(ctx, principal, job_id)).job  # NotFound unless the caller may see it
    async with ctx.units.artifacts() as uow:
        records = await uow.artifacts.for_job(job.id)
    return Listed(records, job.spec.backend, records_outputs(ctx, job.spec.backend))


async def verify_artifacts(
    ctx: Context, principal: Principal, job_id: str, wait: float = SCAN_WAIT
) -> list[Verified]:
    """Hash every recorded member's files again where they live (the control plane's output
    storage, or their node: ``application.node_outputs``) and compare, file by file. A
    directory that is gone shows every recorded file missing. ``wait``: how long nodes may
    take to answer, seconds."""
    job = (await get_job(ctx, principal, job_id)).job  # NotFound unless the caller may see it
    async with ctx.units.artifacts() as uow:
        records = await uow.artifacts.for_job(job.id)
    # the files are where the job's backend kept them: its own storage (Slurm's shared
    # directory), else this control plane's (on a node: asked below)
    store = ctx.backend_outputs.get(job.spec.backend, ctx.outputs)
    on_nodes = await scan_on_nodes(ctx, records, wait)
    out = []
    for record in records:
        found = None
        answer = on_nodes.get(record.member_id)
        if isinstance(answer, str):
            out.append(Verified(record, [], answer))
            continue
        if isinstance(answer, ScanResult):
            if answer.error:
                out.append(Verified(record, [], answer.error))
                continue
            found = answer.manifest
        elif store is not None:
            found = await store.scan(record.job_id, record.attempt_id, record.member_index)
        out.append(Verified(record, compare(record.manifest, found or Manifest(()))))
    return out
