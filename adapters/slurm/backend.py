"""The Slurm backend: one Slurm job per TunePlane attempt, submitted through slurmrestd.

A member's handle is ``<slurm job id>:<rank>:<attempt id>``: every member of an attempt maps to
one task of the attempt's single ``srun`` step (:mod:`adapters.slurm.script`). ``launch`` is
idempotent per member and never submits an attempt twice: the job is named after the attempt
(``tp-<attempt id>``) and looked up (remembered job id, then Slurm's job list) before submitting.

Observing: a member is ``starting`` while its job pends, ``running`` while Slurm runs it or any
node still completes it, and ``exited`` once its task wrote its exit status while another member
runs on (a Ray driver done, a member that failed first), else only once Slurm reports the
allocation ended: the last member waits for that, so the reservation is held until then. Its
exit code is what its task wrote, else the job's, decoded from the wait status. A job Slurm no
longer reports (MinJobAge) is looked up in accounting when it is configured, else it is
``unknown`` (never "succeeded"). An end slurmctld proves (``PREEMPTED``, ``NODE_FAIL``, a job it
requeued, which is cancelled: jobs are submitted never to be requeued) carries its cause for
the retry policy (:mod:`adapters.slurm.ends`). When slurmrestd or slurmctld does not answer,
members are ``unknown`` with the reason and launches wait: nothing falls back to another
backend. See docs/slurm.md.

Checkpoints: given the attempt's checkpoint directory in the shared directory (the control
plane's ``SharedDirCheckpoints``, ``self.checkpoints``), every member gets
``TUNEPLANE_CHECKPOINT_DIR`` and ``TUNEPLANE_RESUME_FROM`` (docs/checkpoints.md).

Metrics: every member gets ``TUNEPLANE_METRICS_DIR``; with a collector configured, each member's
launch writes its collector's member file with a member-scoped token, and ``member.sh`` runs
the collector beside the training (:mod:`adapters.slurm.collector`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from adapters.outputs import FilesystemOutputs
from adapters.shared_checkpoints import SharedDirCheckpoints
from adapters.slurm import ends
from adapters.slurm.attempt_dirs import AttemptDirs, Handle
from adapters.slurm.capacity import capacity, unreported
from adapters.slurm.client import SlurmClient
from adapters.slurm.collector import SlurmCollector
from adapters.slurm.collector_files import CollectorFiles
from adapters.slurm.files import read_from, write_whole
from adapters.slurm.script import batch_script, job_name, job_parts, member_script, parse_comment
from adapters.slurm.versions import SlurmJob, SlurmPartition
from domain.capsule import StorageCapabilities, runner_failure
from domain.catalog import RuntimePin, RuntimeSpec
from domain.errors import InvalidInput, NotFound, Unavailable
from domain.fleet import Node, Pool
from domain.ports import Clock, LaunchRequest, Observation
from domain.progress import ended_outside, exit_words
from domain.requests import require_limits
from domain.runtimes import pin_of
from domain.telemetry_ports import TokenSigner

NOT_SAID = "scancel or a Slurm operator"  # without accounting, Slurm does not record who
OUTPUTS = "outputs"  # the shared directory's folder of members' outputs (attempt ids differ)
CHECKPOINTS = "checkpoints"  # its folder of checkpoints, kept in place across attempts
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmBackend:
    """``ExecutionBackend`` named ``slurm``."""

    name = "slurm"
    # the batch script puts the Job Capsule where each task's runner finds it; no host mounts;
    # outputs are kept in the shared directory (``self.outputs``), not the control plane's
    storage = StorageCapabilities(capsule=True, shared_mounts=False, shared_outputs=False)

    def __init__(
        self,
        client: SlurmClient,
        shared_dir: Path,
        *,
        partitions: dict[str, str] | None = None,
        accounting: bool = False,
        master_port_base: int = 29500,
        gres_name: str = "gpu",
        collector: SlurmCollector | None = None,
        tokens: TokenSigner | None = None,
        clock: Clock | None = None,
        token_lifetime_seconds: int = 30 * 24 * 3600,
        runtime_dirs: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        # members' outputs, kept as artifacts: <shared dir>/outputs/<job>/<attempt>/<rank>/,
        # outside the attempt's directory, so they outlive its release (docs/slurm.md)
        self.outputs = FilesystemOutputs(shared_dir / OUTPUTS)
        # checkpoints, kept in place where the next attempt reads them (docs/checkpoints.md):
        # <shared dir>/checkpoints/<job>/<attempt number>/<checkpoint>/
        self.checkpoints = SharedDirCheckpoints(shared_dir / CHECKPOINTS)
        # runtime name → the directory put first on members' PATH (TUNEPLANE_SLURM_RUNTIMES)
        self.runtime_dirs = dict(runtime_dirs or {})
        self.shared_dir = shared_dir
        self.dirs = AttemptDirs(shared_dir)  # each attempt's directory in it
        self.partitions = dict(partitions or {})  # pool → partition (default: the pool's name)
        self.accounting = accounting
        self.master_port_base = master_port_base
        self.gres_name = gres_name
        # metrics: a collector per member with its member-scoped token (docs/slurm.md)
        self.collector = collector if tokens is not None and clock is not None else None
        self._collector_files = (
            CollectorFiles(collector, tokens, clock, token_lifetime_seconds)
            if collector is not None and tokens is not None and clock is not None
            else None
        )
        self._jobs: dict[str, int] = {}  # attempt id → Slurm job id
        self._locks: dict[str, asyncio.Lock] = {}
        self._partitions_seen: list[SlurmPartition] = []  # by the last capacity()

    async def close(self) -> None:
        await self.client.close()

    def partition_of(self, pool: str) -> str:
        return self.partitions.get(pool, pool)

    # -- ExecutionBackend -----------------------------------------------------------------------

    async def pin(self, runtime: RuntimeSpec) -> RuntimePin:
        """Members run as host processes on the Slurm nodes (no container runtime here): the
        image is not pulled, so the pin is its registered digest, else a digest of its name
        (docs/slurm.md, "Runtimes"). Asks slurmrestd first: while Slurm does not answer, a
        submission is refused with why (503) rather than queued for a cluster that is down."""
        await self.client.ping()
        digest = runtime.digest or "sha256:" + hashlib.sha256(runtime.image.encode()).hexdigest()
        # the image's package list describes the image, which does not run here: the node's
        # python3 is checked for the contract's Python and frameworks only
        return replace(pin_of(runtime, digest), packages={})

    async def launch(self, request: LaunchRequest) -> str:
        for role in request.spec.roles:  # before any file or call; --mem=0 is the whole node
            r = role.resources
            require_limits(r.cpus, r.memory_mb, f"role {role.name} of {request.attempt_id}")
        lock = self._locks.setdefault(request.attempt_id, asyncio.Lock())
        async with lock:
            directory = self.dirs.dir(request.attempt_id)
            await asyncio.to_thread(self.dirs.note_member, directory, request)
            if self._collector_files is not None:
                await self._collector_files.write(directory, request)
            job_id = await self._find(request.attempt_id)
            if job_id is None:
                job_id = await self._submit(request, directory)
            return str(Handle(job_id, request.member_index, request.attempt_id))

    async def observe(self, handle: str) -> Observation:
        h = Handle.parse(handle)
        if h is None or self.dirs.released(h):
            return Observation("missing")
        try:
            jobs = await self.client.job(h.job_id)
        except Unavailable as exc:
            return Observation("unknown", reason=f"Slurm does not answer: {exc.message}")
        source = "Slurm"
        if jobs is None and self.accounting:
            try:
                jobs = await self.client.accounted(h.job_id)
            except Unavailable as exc:
                return Observation("unknown", reason=f"Slurm accounting does not answer: {exc}")
            source = "Slurm accounting"
        elif jobs and any(ends.requeued(j) for j in jobs):
            if not all(j.allocation_ended for j in jobs):
                return await self._cancel_requeued(h, jobs[0])
        elif jobs and jobs[0].state == "CANCELLED" and jobs[0].allocation_ended:
            jobs[0] = await self._who_cancelled(h, jobs[0])
        if jobs is None:
            return Observation(
                "unknown",
                reason=f"Slurm no longer reports job {h.job_id} (finished jobs leave after"
                " MinJobAge) and no accounting is configured: its outcome cannot be confirmed",
            )
        return self._observation(h, jobs, source)

    def _observation(self, h: Handle, jobs: list[SlurmJob], source: str) -> Observation:
        if not all(j.allocation_ended for j in jobs):
            if any(j.state in ("PENDING", "REQUEUED") or "CONFIGURING" in j.flags for j in jobs):
                reason = next((j.reason for j in jobs if j.reason not in ("", "None")), "")
                why = f"Slurm job {h.job_id} pending" + (f": {reason}" if reason else "")
                return Observation("starting", reason=why)
            written = self.dirs.exit_file(h)
            if written is not None and self.dirs.others_unfinished(h):
                # its task ended while others run on (a Ray driver, a failed member): exited
                # now; the attempt's reservation stays held by the others until Slurm reports
                # the allocation ended, which the last member waits for
                why = (
                    runner_failure(written)
                    or self.dirs.stopped_for(h, written)
                    or (exit_words(written) if written else "")
                )
                return Observation("exited", exit_code=written, reason=why)
            return Observation("running")
        lead = jobs[0]
        written = self.dirs.exit_file(h)
        if written is not None:
            code = written
        elif lead.state == "CANCELLED":  # scancel: SIGTERM. The batch script's own status
            code = 128 + 15  # is not the member's (srun may have failed first: "job expired")
        elif lead.exit_code not in (None, 0):
            code = lead.exit_code
        elif lead.state == "COMPLETED" and lead.exit_code == 0:
            code = 0
        else:
            code = -1
        reason = runner_failure(code) or ""  # the capsule's checks failed: say which
        cause = ends.cause_of(jobs)  # what slurmctld proves: preempted, node-lost
        if any(ends.requeued(j) for j in jobs):
            reason = reason or ends.requeued_words(next(j for j in jobs if ends.requeued(j)))
        elif not reason and written is not None and lead.state in ("COMPLETED", "FAILED"):
            # the task's own exit: the words every backend uses (docs/backends.md)
            reason = self.dirs.stopped_for(h, code) or (exit_words(code) if code else "")
        elif not reason and (lead.state != "COMPLETED" or code != 0):
            why = f": {lead.reason}" if lead.reason not in ("", "None") else ""
            reason = f"{source} reports job {h.job_id} {lead.state}{why}, exit code {code}"
            if lead.state == "CANCELLED":  # a stop through TunePlane is recorded as one first
                who = f"scancel by {lead.cancelled_by}" if lead.cancelled_by else NOT_SAID
                reason = ended_outside(f"{who}; {reason}")
        return Observation("exited", exit_code=code, reason=reason, cause=cause)

    async def _cancel_requeued(self, h: Handle, job: SlurmJob) -> Observation:
        """slurmctld requeued the attempt's job behind TunePlane's back (adapters/slurm/ends.py):
        cancel it, so that it never runs again under this attempt; the member stays as it was
        until Slurm reports the allocation ended, and then ends ``preempted``."""
        try:
            await self.client.cancel(h.job_id)
        except Unavailable as exc:
            return Observation(
                "unknown", reason=f"{ends.requeued_words(job)}; the cancel failed: {exc.message}"
            )
        return Observation("running", reason=ends.requeued_words(job))

    async def _who_cancelled(self, h: Handle, job: SlurmJob) -> SlurmJob:
        """slurmctld does not say who cancelled a job; accounting does (``kill_request_user``,
        what ``sacct`` shows as "CANCELLED by UID"). Asked only with accounting configured, for
        a cancelled job whose allocation ended; an accounting error or a record not written yet
        leaves it unsaid ("scancel or a Slurm operator")."""
        if not self.accounting:
            return job
        with contextlib.suppress(Unavailable):
            for record in await self.client.accounted(h.job_id) or []:
                if record.job_id == job.job_id and record.cancelled_by:
                    return replace(job, cancelled_by=record.cancelled_by)
        return job

    async def stop(self, handle: str, grace_seconds: float) -> None:
        """Cancel the attempt's Slurm job (every member: one allocation). Slurm signals the
        tasks with SIGTERM and kills them after its ``KillWait``. Idempotent."""
        h = Handle.parse(handle)
        if h is None or self.dirs.released(h):
            return
        await self.client.cancel(h.job_id)

    async def logs(self, handle: str, follow: bool) -> AsyncIterator[bytes]:
        """The member's output (its task's stdout and stderr); member 0's starts with the batch
        step's (capsule checks, srun errors). From the attempt's shared directory."""
        h = Handle.parse(handle)
        if h is None or self.dirs.released(h):
            raise NotFound(
                f"member {handle} is no longer held by the Slurm backend",
                fix="its stored log is shown by `tp job logs`",
            )
        directory = self.dirs.dir(h.attempt_id)
        files = ([directory / "batch.log"] if h.rank == 0 else []) + [
            directory / f"member-{h.rank}.log"
        ]
        offsets = dict.fromkeys(files, 0)
        while True:
            for path in files:
                chunk = await asyncio.to_thread(read_from, path, offsets[path])
                if chunk:
                    offsets[path] += len(chunk)
                    yield chunk
            if not follow or (await self.observe(handle)).status in ("exited", "missing"):
                if follow:  # what was written between the last read and the exit
                    for path in files:
                        chunk = await asyncio.to_thread(read_from, path, offsets[path])
                        if chunk:
                            yield chunk
                return
            await asyncio.sleep(1.0)

    async def held(self) -> dict[str, str]:
        """member id → handle for the members of every TunePlane job Slurm still lists."""
        out: dict[str, str] = {}
        for job in await self.client.jobs():
            if not job.name.startswith("tp-") or job.het_job_offset:
                continue
            attempt_id = parse_comment(job.comment)
            if attempt_id is None:
                continue
            for rank, member_id in (await asyncio.to_thread(self.dirs.members, attempt_id)).items():
                h = Handle(job.job_id, rank, attempt_id)
                if not self.dirs.released(h):
                    out[member_id] = str(h)
        return out

    async def release(self, handle: str) -> None:
        """Forget the member (a marker in the attempt's directory); the directory goes when
        every member it knew is forgotten."""
        h = Handle.parse(handle)
        if h is None:
            return
        if await asyncio.to_thread(self.dirs.release, h):
            self._jobs.pop(h.attempt_id, None)

    async def capacity(self) -> tuple[list[Pool], list[Node]]:
        """Pools from Slurm's partitions, nodes with their state (capacity sync, docs/slurm.md).
        Raises Unavailable when Slurm does not answer."""
        partitions = await self.client.partitions()
        nodes = await self.client.nodes()
        self._partitions_seen = partitions
        pool_of = {partition: pool for pool, partition in self.partitions.items()}
        return capacity(partitions, nodes, pool_of, gres_name=self.gres_name)

    def unreported(self, pool: str) -> str:
        """Why the last ``capacity()`` had no pool ``pool``: its partition is missing or empty."""
        return unreported(pool, self.partition_of(pool), self._partitions_seen)

    # -- internals ------------------------------------------------------------------------------

    async def _find(self, attempt_id: str) -> int | None:
        """The Slurm job of this attempt if it was submitted (by us or an earlier process)."""
        if attempt_id in self._jobs:
            return self._jobs[attempt_id]
        recorded = self.dirs.dir(attempt_id) / "slurm-job-id"
        with contextlib.suppress(OSError, ValueError):
            self._jobs[attempt_id] = int(recorded.read_text())
            return self._jobs[attempt_id]
        name = job_name(attempt_id)
        for job in await self.client.jobs():
            if job.name == name and parse_comment(job.comment) == attempt_id:
                self._jobs[attempt_id] = job.het_job_id or job.job_id
                return self._jobs[attempt_id]
        return None

    async def _submit(self, request: LaunchRequest, directory: Path) -> int:
        spec = request.spec
        partition_of = {r.pool: self.partition_of(r.pool) for r in spec.roles}
        environment = {
            "PATH": JOB_PATH,
            "TUNEPLANE_ATTEMPT_ID": request.attempt_id,
            "TUNEPLANE_ATTEMPT": str(request.attempt),
        }
        parts = job_parts(
            request, str(directory), partition_of, environment, gres_name=self.gres_name
        )
        member = member_script(
            request,
            str(directory),
            self.master_port_base,
            self.collector,
            runtime_dir=self.runtime_dirs.get(spec.runtime.name),
            outputs_root=str(self.shared_dir / OUTPUTS) if request.outputs else None,
        )
        script = batch_script(request, str(directory))
        await asyncio.to_thread(self._stage, request, directory, member)
        result = await self.client.submit(script, parts)
        if result.job_id is None:  # refused: nothing of this attempt runs; forget its files
            await asyncio.to_thread(shutil.rmtree, directory, True)
            errors = "; ".join(str(e) for e in result.errors) or "no reason given"
            raise InvalidInput(
                f"Slurm refused the job of attempt {request.attempt_id}: {errors}",
                fix="check the pool's partition and resources against `sinfo` on the cluster",
                field="intent.profiles",
            )
        self._jobs[request.attempt_id] = result.job_id
        await asyncio.to_thread(
            write_whole, directory / "slurm-job-id", str(result.job_id).encode()
        )
        return result.job_id

    def _stage(self, request: LaunchRequest, directory: Path, member: str) -> None:
        spec = request.spec
        if spec.capsule is not None:
            if request.capsule is None:
                raise InvalidInput("the launch of a job with a Job Capsule carries no capsule")
            got = "sha256:" + hashlib.sha256(request.capsule).hexdigest()
            if got != spec.capsule.blob:
                raise InvalidInput(
                    f"the Job Capsule's bytes hash to {got}, not the committed {spec.capsule.blob}"
                )
            write_whole(directory / "capsule.tar", request.capsule)
        elif request.source is not None:
            write_whole(directory / "source.tar.gz", request.source)
        write_whole(directory / "member.sh", member.encode(), mode=0o755)
