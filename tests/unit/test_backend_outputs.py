"""Where a backend's members' outputs are kept and read again (``Context.outputs_of``): the
backend's own storage when it has one (Slurm: its shared directory, docs/slurm.md), else the
control plane's when the backend shares outputs, else nowhere; and ``tp artifacts verify``
hashes a job's files again where its backend kept them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from adapters.memory.backend import MemoryBackend
from adapters.outputs import FilesystemOutputs, scan_directory
from application.artifacts import verify_artifacts
from domain.artifacts import ArtifactRecord
from domain.capsule import StorageCapabilities
from tests.contract.builders import a_job, a_member, an_attempt, at
from tests.support.context import ALICE, memory_context
from tests.unit.test_slurm_metrics import request, run_member

pytestmark = pytest.mark.unit


def test_a_backends_own_storage_comes_first(tmp_path: Path) -> None:
    mine, control_plane = FilesystemOutputs(tmp_path / "a"), FilesystemOutputs(tmp_path / "b")
    ctx = dataclasses.replace(memory_context(tmp_path), outputs=control_plane,
                              backend_outputs={"slurm": mine})  # fmt: skip
    slurm = MemoryBackend(storage=StorageCapabilities(capsule=True))
    slurm.name = "slurm"
    shares = MemoryBackend(storage=StorageCapabilities(capsule=True, shared_outputs=True))
    keeps_none = MemoryBackend(storage=StorageCapabilities(capsule=True))
    assert ctx.outputs_of(slurm) is mine
    assert ctx.outputs_of(shares) is control_plane
    assert ctx.outputs_of(keeps_none) is None


async def test_verify_reads_the_files_where_the_jobs_backend_kept_them(tmp_path: Path) -> None:
    slurm_store = FilesystemOutputs(tmp_path / "shared" / "outputs")
    ctx = dataclasses.replace(
        memory_context(tmp_path),
        outputs=FilesystemOutputs(tmp_path / "state" / "outputs"),  # not where they are
        backend_outputs={"slurm": slurm_store},
    )
    job = a_job()
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, backend="slurm"))
    attempt = an_attempt(job)
    member = a_member(attempt)
    where = Path(await slurm_store.prepare(job.id, attempt.id, 0))
    (where / "report.json").write_text("{}\n")
    manifest = scan_directory(where)
    assert manifest is not None
    async with ctx.uow() as uow:
        await uow.jobs.add(job)
        await uow.attempts.add(attempt)
        await uow.members.add(member)
        await uow.artifacts.record(
            ArtifactRecord(member.id, job.id, attempt.id, 1, 0, manifest, at(1))
        )
        await uow.commit()
    [checked] = await verify_artifacts(ctx, ALICE, job.id)
    assert checked.ok, checked.differences
    (where / "report.json").write_text('{"changed": true}\n')
    [checked] = await verify_artifacts(ctx, ALICE, job.id)
    assert [(d.path, d.problem) for d in checked.differences] == [("report.json", "changed")]


def test_a_slurm_member_writes_its_outputs_in_its_ranks_directory(tmp_path: Path) -> None:
    root = tmp_path / "shared" / "outputs"
    for rank in (0, 1):
        req = request('echo "r$RANK" > "$TUNEPLANE_OUTPUT_DIR/out.txt"', index=rank)
        rc, log, _ = run_member(tmp_path, req, None, outputs_root=str(root))
        assert rc == 0, log
        assert (root / req.job_id / req.attempt_id / str(rank) / "out.txt").read_text() == (
            f"r{rank}\n"
        )
    # no outputs kept (a backend without storage): the variable is not set
    rc, log, _ = run_member(tmp_path, request("echo outputs=${TUNEPLANE_OUTPUT_DIR:-unset}"), None)
    assert rc == 0 and "outputs=unset" in log, log


@pytest.mark.parametrize("replaced", ["member", "attempt"])
async def test_a_directory_replaced_by_a_link_elsewhere_is_not_followed(
    tmp_path: Path, replaced: str
) -> None:
    """On Slurm the member can write beside its own output directory (the shared filesystem):
    swapping it (or its attempt's) for a link must not make the control plane hash, and
    record, files outside the outputs root."""
    store = FilesystemOutputs(tmp_path / "outputs")
    member = Path(await store.prepare("job-1", "att-1", 0))
    elsewhere = tmp_path / "secrets"
    (elsewhere / "0").mkdir(parents=True)
    (elsewhere / "key").write_text("k")
    (elsewhere / "0" / "key").write_text("k")
    victim = member if replaced == "member" else member.parent
    victim.rename(tmp_path / "moved")
    victim.symlink_to(elsewhere)
    assert await store.scan("job-1", "att-1", 0) is None
