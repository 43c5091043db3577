"""A Slurm member that exits with a code of its own is reported in the same words as on every
other backend ("exited with code 3": docs/backends.md, outcome table); Slurm's own words stay
for what only Slurm knows (cancelled, timed out, out of memory, no exit status written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.slurm.attempt_dirs import Handle
from adapters.slurm.backend import SlurmBackend
from adapters.slurm.client import SlurmClient, SlurmEndpoint
from adapters.slurm.versions import SlurmJob

pytestmark = pytest.mark.unit


def ended(state: str, reason: str, code: int | None) -> SlurmJob:
    return SlurmJob(12, "tp-att-1", "", state, frozenset(), reason, code, "n1", "debug")


@pytest.fixture
def backend(tmp_path: Path) -> SlurmBackend:
    (tmp_path / "att-1").mkdir()
    return SlurmBackend(SlurmClient(SlurmEndpoint("unix:/nonexistent.sock")), tmp_path)


def observe(backend: SlurmBackend, job: SlurmJob, written: int | None, tmp_path: Path) -> object:
    if written is not None:
        (tmp_path / "att-1" / "member-0.exit").write_text(f"{written}\n")
    return backend._observation(Handle(12, 0, "att-1"), [job], "Slurm")


def test_a_members_own_exit_code_reads_as_on_every_backend(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    obs = observe(backend, ended("FAILED", "NonZeroExitCode", 3), 3, tmp_path)
    assert (obs.status, obs.exit_code, obs.reason) == ("exited", 3, "exited with code 3")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "state, reason, written, words",
    [
        ("CANCELLED", "None", None, "Slurm reports job 12 CANCELLED, exit code 143"),
        ("TIMEOUT", "TimeLimit", 143, "Slurm reports job 12 TIMEOUT: TimeLimit, exit code 143"),
        ("OUT_OF_MEMORY", "OutOfMemory", 137, "Slurm reports job 12 OUT_OF_MEMORY"),
        ("FAILED", "NonZeroExitCode", None, "Slurm reports job 12 FAILED: NonZeroExitCode"),
    ],
)
def test_what_only_slurm_knows_keeps_slurms_words(
    backend: SlurmBackend, tmp_path: Path, state: str, reason: str, written: int | None, words: str
) -> None:
    obs = observe(
        backend, ended(state, reason, 3 if written is None else written), written, tmp_path
    )
    assert words in obs.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("state", ["FAILED", "RUNNING"])
def test_a_member_srun_killed_for_a_failed_peer_is_stopped_by_that_failure(
    backend: SlurmBackend, tmp_path: Path, state: str
) -> None:
    """srun --kill-on-bad-exit ends the other tasks with SIGTERM once one exits non-zero: the
    same end the gang rule gives on every other backend ("stopped: member 1 failed"), whether
    the allocation ended already or member 1 still has to be seen."""
    d = tmp_path / "att-1"
    for rank, code in ((0, 143), (1, 3)):
        (d / f"member-{rank}.id").write_text(f"mem-{rank}\n")
        (d / f"member-{rank}.exit").write_text(f"{code}\n")
    (d / "member-2.id").write_text("mem-2\n")  # a third member, still running
    job = ended(state, "NonZeroExitCode", 3)
    obs = backend._observation(Handle(12, 0, "att-1"), [job], "Slurm")
    assert (obs.status, obs.exit_code, obs.reason) == ("exited", 143, "stopped: member 1 failed")
    peer = backend._observation(Handle(12, 1, "att-1"), [job], "Slurm")
    assert (peer.exit_code, peer.reason) == (3, "exited with code 3")


def test_every_member_killed_by_sigterm_is_no_peers_failure(
    backend: SlurmBackend, tmp_path: Path
) -> None:
    d = tmp_path / "att-1"
    for rank in (0, 1):
        (d / f"member-{rank}.id").write_text(f"mem-{rank}\n")
        (d / f"member-{rank}.exit").write_text("143\n")
    obs = backend._observation(Handle(12, 0, "att-1"), [ended("FAILED", "", 143)], "Slurm")
    assert (obs.exit_code, obs.reason) == (143, "killed by SIGTERM")
