"""Issue 22: why a Slurm job ended, classified over what a real slurmrestd answered
(tests/fixtures/slurm_recorded/v0.0.38: a node set down under a --no-requeue job, a job that
`scontrol requeue` requeued, then cancelled) and over shapes of the states slurmctld gives a
preempted or unbootable job (adapters/slurm/ends.py, docs/slurm.md#ends-and-retries)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from adapters.slurm.ends import cause_of, requeued, requeued_words
from adapters.slurm.versions import JobRequest, SlurmJob, dialect

pytestmark = pytest.mark.unit

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_recorded" / "v0.0.38"


def recorded(name: str) -> SlurmJob:
    body = json.loads((RECORDED / f"{name}.json").read_text())["body"]
    return dialect("v0.0.38").job(body["jobs"][0])


def test_a_node_failure_proves_node_lost_and_a_requeue_preempted() -> None:
    node_fail = recorded("job_node_fail")
    assert (node_fail.state, node_fail.reason, node_fail.restarts) == ("NODE_FAIL", "NodeDown", 0)
    assert cause_of([node_fail]) == "node-lost" and not requeued(node_fail)
    again = recorded("job_requeued")  # pending again under the same id: it would run twice
    assert (again.state, again.restarts) == ("PENDING", 1) and requeued(again)
    assert cause_of([again]) == "preempted"
    cancelled = recorded("job_requeued_cancelled")
    assert (cancelled.state, cancelled.allocation_ended) == ("CANCELLED", True)
    assert cause_of([cancelled]) == "preempted"
    assert requeued_words(cancelled).startswith(f"Slurm requeued job {cancelled.job_id} (once;")


def test_other_states_prove_their_cause_or_none() -> None:
    base = recorded("job_completed")
    assert cause_of([base]) == ""
    for state, cause in (
        ("PREEMPTED", "preempted"),
        ("BOOT_FAIL", "node-lost"),
        ("REQUEUED", "preempted"),
        ("FAILED", ""),
        ("CANCELLED", ""),  # scancel: an end outside TunePlane, not a scheduler's
        ("TIMEOUT", ""),
        ("OUT_OF_MEMORY", ""),
    ):
        assert cause_of([dataclasses.replace(base, state=state)]) == cause, state
    # a heterogeneous job: any component that proves a cause decides
    het = [base, dataclasses.replace(base, state="NODE_FAIL", het_job_offset=1)]
    assert cause_of(het) == "node-lost"


def test_every_job_is_submitted_so_that_slurmctld_never_requeues_it() -> None:
    part = JobRequest("tp-a", "c", 1, "/d", "/d/batch.log", {"PATH": "/bin"})
    old = dialect("v0.0.38").submit_body("#!/bin/sh", [part])["job"]
    assert old["no_requeue"] is True and "requeue" not in old  # sbatch's option names
    for version in ("v0.0.40", "v0.0.41", "v0.0.42"):
        new = dialect(version).submit_body("#!/bin/sh", [part])["job"]
        assert new["requeue"] is False and "no_requeue" not in new, version
