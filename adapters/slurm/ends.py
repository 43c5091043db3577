"""Why a Slurm job ended, as the job's retry policy names ends (domain/retry.py). Pure: read
from what slurmctld (or accounting) reports of the job, never from a failure to reach it (that
is ``unknown``, adapters/slurm/backend.py). See docs/slurm.md#ends-and-retries.

TunePlane submits every job with ``requeue: false`` (``sbatch --no-requeue``): slurmctld then
never runs an attempt's job a second time under the same job id. A preemption ends the job
``PREEMPTED`` (PreemptMode=REQUEUE falls back to cancelling a job that may not be requeued), a
node failure ``NODE_FAIL``, a node that did not boot ``BOOT_FAIL``, and ``scontrol requeue`` is
refused ("Requested operation is presently disabled"). A job that slurmctld requeued all the
same (its ``restart_cnt`` above 0: a job whose requeue flag an operator turned back on, or one
submitted before this rule) is ended by the backend and its end is ``preempted``.
"""

from __future__ import annotations

from adapters.slurm.versions import SlurmJob

# slurmctld's final states that prove why the job ended
CAUSES = {"PREEMPTED": "preempted", "NODE_FAIL": "node-lost", "BOOT_FAIL": "node-lost"}


def requeued(job: SlurmJob) -> bool:
    """slurmctld requeued the job (it would run again under the same id)."""
    return job.restarts > 0 or job.state == "REQUEUED"


def cause_of(jobs: list[SlurmJob]) -> str:
    """The end the job's components prove (``preempted``, ``node-lost``), or "" when they prove
    none. A heterogeneous job ends as one: the first component that proves a cause decides."""
    for job in jobs:
        if requeued(job):
            return "preempted"
        if job.state in CAUSES:
            return CAUSES[job.state]
    return ""


def requeued_words(job: SlurmJob) -> str:
    times = "once" if job.restarts <= 1 else f"{job.restarts} times"
    return (
        f"Slurm requeued job {job.job_id} ({times}; preemption, a node failure or"
        " `scontrol requeue`): TunePlane cancelled it, so that the attempt never runs twice"
    )
