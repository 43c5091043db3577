"""How a job moves on from what its members are observed doing: pure rules the supervisor
applies each tick (``application/supervisor.py``)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from domain.jobs import Attempt, Job, Member, attempt_outcome
from domain.lifecycle import ATTEMPT_FINAL, MEMBER_FINAL, AttemptState, JobState, MemberState
from domain.ports import Observation
from domain.rendezvous import RAY
from domain.retry import REQUEUED, AttemptEnd, End, decide

OUTSIDE = "cancelled outside TunePlane"


def ended_outside(what: str) -> str:
    """The reason of a member ended by something TunePlane did not ask for (``scancel``,
    ``docker kill``/``stop``/``rm``, a deleted Kubernetes Job): the same shape on every
    backend, ``cancelled outside TunePlane: <who or what, as the backend tells>``. Such a
    member is ``failed`` (docs/lifecycles.md, "One meaning for one end"): ``cancelled`` is
    kept for a stop asked through TunePlane."""
    return f"{OUTSIDE}: {what}"


_OUTCOME = {
    "cancelled": (JobState.CANCELLED, AttemptState.CANCELLED),
    "failed": (JobState.FAILED, AttemptState.FAILED),
    "succeeded": (JobState.SUCCEEDED, AttemptState.SUCCEEDED),
}


def first_failure(members: list[Member]) -> str | None:
    """ "member 2 failed" for the lowest-index failed member; None if none failed."""
    failed = [m for m in members if m.state is MemberState.FAILED]
    return f"member {failed[0].index} failed" if failed else None


def driver_ended(members: list[Member], process_model: str) -> str | None:
    """A Ray gang ends with its driver: once member 0 (the head, where the driver runs)
    succeeded, the workers are stopped and their ends are not failures. None otherwise."""
    if process_model != RAY or len(members) < 2:
        return None
    driver = min(members, key=lambda m: m.index)
    if driver.state is MemberState.SUCCEEDED:
        return "the Ray driver (member 0) ended"
    return None


def signal_words(code: int | None) -> str | None:
    """``killed by SIGTERM`` for an exit code of 128 + a signal (the shell's convention), else
    None."""
    if code is None or code <= 128:
        return None
    try:
        return f"killed by {signal.Signals(code - 128).name}"
    except ValueError:
        return None


def exit_words(code: int) -> str:
    """How a member's own exit reads, in the same words on every backend (docs/backends.md)."""
    return signal_words(code) or f"exited with code {code}"


def member_after(
    m: Member,
    obs: Observation,
    stopping: bool,
    failing: str | None,
    now: datetime,
    done: str | None = None,
) -> Member:
    """``failing``: why the gang is being stopped after a failure; ``done``: why after its
    work ended (a Ray driver that succeeded): a member that then ends has not failed.

    A reason belongs to the state it was given with: a move replaces or clears it, and a member
    that stays in its state takes the backend's current reason for it (a pending Slurm job's
    ``Resources``, a node now lost), so nothing says what an earlier state said."""
    if obs.status == "starting":
        if m.state is MemberState.UNKNOWN:  # contact is back and it has not started yet
            return m.moved(MemberState.STARTING, now, obs.reason)
        if m.state is MemberState.STARTING:
            return m.explained(obs.reason, now)
        return m
    if obs.status == "running":
        if m.state in (MemberState.STARTING, MemberState.UNKNOWN):
            return m.moved(MemberState.RUNNING, now, obs.reason)
        return m.explained(obs.reason, now) if m.state is MemberState.RUNNING else m
    if obs.status == "unknown":
        why = obs.reason or "control contact lost"
        if m.state in (MemberState.STARTING, MemberState.RUNNING):
            return m.moved(MemberState.UNKNOWN, now, why)
        return m.explained(why, now) if m.state is MemberState.UNKNOWN else m
    if done is not None and obs.status in ("exited", "missing") and not stopping:
        code = obs.exit_code if obs.status == "exited" else None
        return m.moved(MemberState.SUCCEEDED, now, f"stopped: {done}", exit_code=code)
    if obs.status == "exited":
        code = obs.exit_code if obs.exit_code is not None else -1
        if stopping:
            return m.moved(MemberState.STOPPED, now, "stopped on request", exit_code=code)
        if failing is not None and code != 0:
            return m.moved(MemberState.FAILED, now, f"stopped: {failing}", exit_code=code)
        if code == 0:
            return m.moved(MemberState.SUCCEEDED, now, exit_code=0)
        reason = obs.reason or exit_words(code)
        return m.moved(MemberState.FAILED, now, reason, exit_code=code)
    if obs.status == "missing":
        # a stop that removes the workload (Kubernetes) shows its members missing, not exited:
        # the same words as an exited member, so every backend reports a stop alike; what
        # TunePlane stopped is a stop, never an outside end
        if stopping:
            return m.moved(MemberState.STOPPED, now, "stopped on request")
        if failing is not None:
            return m.moved(MemberState.FAILED, now, f"stopped: {failing}")
        gone = ended_outside("its container disappeared from the engine")
        return m.moved(MemberState.FAILED, now, obs.reason or gone)
    return m


def job_after(
    job: Job, attempt: Attempt, members: list[Member], now: datetime
) -> tuple[Job, Attempt]:
    if members and all(m.state in MEMBER_FINAL for m in members):
        outcome, reason, code = attempt_outcome(members)
        job_state, attempt_state = _OUTCOME[outcome]
        if attempt.state not in ATTEMPT_FINAL:
            attempt = attempt.moved(attempt_state, now, reason, code)
        if job.state is not job_state:
            job = job.moved(job_state, now, reason, code)
        return job, attempt
    if any(m.state is MemberState.RUNNING for m in members):
        if attempt.state is AttemptState.LAUNCHING:
            attempt = attempt.moved(AttemptState.RUNNING, now)
        if job.state is JobState.STARTING:
            job = job.moved(JobState.RUNNING, now)
    return job, attempt


def retried(job: Job, ended: Job, attempts: Sequence[Attempt], now: datetime) -> Job:
    """After an attempt ended: ``ended`` (the job as its last attempt left it) or, when its
    retry policy starts another, ``job`` moved back to pending until the backoff has passed
    (the reason says when). ``attempts``: all of the job's attempts, the one that ended last.
    A job that ends under a policy that retries says why no further attempt starts.

    A stop by its user (a stopping job) never retries; attempts queued again for no fault of
    the job (``REQUEUED``) are not counted."""
    if ended.state is not JobState.FAILED or job.state is JobState.STOPPING:
        return ended
    history = [
        AttemptEnd(a.end, a.updated_at, a.exit_code, a.reason)
        for a in attempts
        if a.end and a.end != REQUEUED
    ]
    if not history or not job.spec.retry.retries:
        return ended
    verdict = decide(job.spec.retry, history)
    if isinstance(verdict, End):
        return replace(ended, reason=verdict.why)
    return job.moved(JobState.PENDING, now, verdict.why, not_before=verdict.not_before)
